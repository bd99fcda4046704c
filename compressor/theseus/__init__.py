"""BERT-of-Theseus progressive module replacing. Arrives with its own issue."""
