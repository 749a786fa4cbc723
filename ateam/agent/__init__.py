"""One ateam agent: a long-lived process that works queued tasks one at a time.

Six sub-packages, top first, each importing only those below it: ``runtime`` (the
process and its faces), ``native`` (ateam's model-and-tools task runner), ``loop`` (the
work loop, which knows a runner only by ``loop/task.py``'s protocol), ``context`` (what
the model sees), ``models`` (which model) and ``state`` (what is kept on disk).
"""
