"""One-off experiments behind the committed figures in bench/results (run from the checkout
root, e.g. ``python -m bench.experiments.quant_sst2``); not part of the installed package."""
