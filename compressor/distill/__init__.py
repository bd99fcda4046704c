"""Knowledge distillation: soft targets, hidden states, attention, MiniLM relations. Arrives with its own issue."""
