"""ONNX export and the torch-free deployment runtime."""
