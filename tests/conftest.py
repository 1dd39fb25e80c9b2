import os

# Tests share 2 cores with actor processes: keep every library to one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")
