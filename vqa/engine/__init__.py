"""The engines that turn a path into a record, one module each (docs: How it works):

    frames.py     the one frame loop: a reader's frames -> views and stats in batches
    local.py      workers=0: LocalEngine, in this process
    pool.py       workers>=1: PoolEngine, the dispatcher over the decode workers
    processes.py  the parent's side of the decode worker processes
    worker.py     a decode worker's own loop
    prestart.py   the first decode worker of `vqa score`, started before the command's imports
    messages.py   the typed tasks and messages between the two
    conclude.py   frames -> a record's counts, score, defects and warnings
"""
