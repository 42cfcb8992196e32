# How the `python` tool runs a call's code (scripts/install-python-interpreter puts
# this program in the tool's argv, as `python -c THIS CODE`). It runs CODE as
# `python -c CODE` would: as `__main__`, with `sys.argv == ['-c']`, the same exit
# status for `sys.exit` and uncaught exceptions, the same traceback. Then it ends the
# process without CPython's teardown: the instance is discarded after the call, and
# the teardown (a full garbage collection and the clearing of every module) was 83%
# of a warm `pass` call's CPU in `perf` (the call: 13-18 ms before, 2 ms after). What
# outlives the code is still
# finished as at a normal exit: atexit handlers run, the program's globals are
# released (closing, and so flushing, the files they hold) and standard output and
# error are flushed. Not done: finalizers of objects kept alive only by reference
# cycles.
def _toolhost_main():
    import sys

    code = sys.argv.pop(1)
    main = globals()
    del main["_toolhost_main"]
    status = 0
    try:
        compiled = compile(code, "<string>", "exec")
        # Tracebacks show CODE's lines, as `python -c` registers its code (by code
        # object, not by the name "<string>", which is this program's too).
        import linecache

        linecache._register_code(compiled, code, "<string>")
        exec(compiled, main)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:
        # The traceback without this function's frame.
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        status = 1
    import atexit
    import os

    atexit._run_exitfuncs()
    main.clear()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
    # As CPython's own exit: the status's low eight bits.
    os._exit(status & 0xFF)


_toolhost_main()
