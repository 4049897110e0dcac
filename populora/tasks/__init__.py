"""The task world's ground floor, torch-free: the task families every measuring and training tool draws from
(`families`: programs composed from typed primitives, split by program text into train, validation and pool)."""
