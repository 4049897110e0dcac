"""Controls that show whether training can work at all: `positive` (a task family where learning is possible)."""
