"""The process id kept without a system call follows every fork."""

from __future__ import annotations

import os

from xsm_celery.process import current_pid


def test_the_kept_id_is_this_process_and_each_forked_childs_own() -> None:
    assert current_pid() == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # report the child's view, then leave without the parent's cleanup
        try:
            os.write(write, f"{current_pid()} {os.getpid()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        kept, actual = (int(x) for x in pipe.read().split())
    os.waitpid(child, 0)
    assert kept == actual == child
    assert current_pid() == os.getpid() != child
