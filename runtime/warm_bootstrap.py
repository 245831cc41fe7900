# cubicle's warm-interpreter bootstrap (runtime/warm.h, DESIGN §5).
#
# Started by a zygote's init as `python3 -I ... -c <this> FD MODULE...`,
# already inside the sandbox under its seccomp policy, capabilities dropped,
# stdio on /dev/null. It imports the profile's modules, says "R" on socket
# FD (or "E" and why, then exits), and blocks for exactly one request: the
# launcher's execution-request message, forwarded unchanged by init, with
# the request's stdin/stdout/stderr as SCM_RIGHTS fds. Then it becomes that
# request — stdio, environment, cwd, sys.argv — and runs the script, -c code,
# -m module or stdin program as __main__, the way `python3 -I` would, and
# ends with os._exit once stdio is flushed. A request the launcher did not
# mark warm is exec'd instead. One process, one request: nothing is reused.
#
# This file is embedded in the cubicle binary at build time; it must stay
# free of anything that writes outside the sandbox's own process.


def _cubicle_bootstrap():
    import os
    import socket
    import struct
    import sys

    fd = int(sys.argv[1])
    preload = sys.argv[2:]
    sock = socket.socket(fileno=fd)
    try:
        import importlib
        for name in preload:
            importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - reported, then exit
        reason = "%s: %s" % (type(e).__name__, e)
        sock.send(b"E" + reason.encode("utf-8", "backslashreplace")[:240])
        os._exit(1)
    import io, threading, types  # what the hand-off needs, loaded ahead of it
    sock.send(b"R")

    # Header: magic, argc, envc, flags, warm (namespaces/exec_request.h).
    header = struct.Struct("=IIIII")
    data, fds, flags, _ = socket.recv_fds(sock, 128 * 1024 + 1, 3)
    sock.close()
    if len(fds) != 3 or len(data) < header.size or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        os._exit(126)
    magic, argc, envc, _flags, warm = header.unpack_from(data)
    strings = data[header.size:].split(b"\0")
    if magic != 0x63756231 or len(strings) != argc + envc + 3 or strings[-1] != b"":
        os._exit(126)
    argv = strings[:argc]
    env = strings[argc:argc + envc]
    cwd = strings[argc + envc]
    search_path = strings[argc + envc + 1]

    for target, source in enumerate(fds):
        if source != target:
            os.dup2(source, target)
    for source in fds:
        if source > 2:
            os.close(source)
    os.chdir(cwd)
    os.environ.clear()
    for entry in env:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value

    if warm == 0:
        # Not an invocation of this interpreter: become the program asked for,
        # with the signal state of a fresh process. Python ignores SIGPIPE
        # and SIGXFSZ at start, and an ignored signal stays ignored across
        # execve: `yes | head -1` would never end.
        import signal
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        try:
            if b"/" in argv[0]:
                os.execve(argv[0], argv, os.environb)
            for directory in search_path.split(b":"):
                try:
                    os.execve(os.path.join(directory or b".", argv[0]), argv, os.environb)
                except (FileNotFoundError, NotADirectoryError):
                    continue
            raise FileNotFoundError(2, "No such file or directory")
        except OSError as e:
            os.write(2, b"cubicle: execve(%s): %s\n" % (argv[0], e.strerror.encode()))
            os._exit(127)

    _run_as_main(os, sys, [a.decode("utf-8", "surrogateescape") for a in argv], warm & 0xFF, warm >> 8)


def _run_as_main(os, sys, argv, mode, index):
    import io

    # Fresh stdio objects over the request's fds, configured as the
    # interpreter would have configured them at start-up.
    def stream(fd, mode, **kw):
        raw = io.FileIO(fd, mode, closefd=False)
        tty = raw.isatty()
        buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, line_buffering=tty or kw.pop("line_buffering", False), **kw)

    sys.stdin = sys.__stdin__ = stream(0, "r")
    sys.stdout = sys.__stdout__ = stream(1, "w")
    sys.stderr = sys.__stderr__ = stream(2, "w", errors="backslashreplace", line_buffering=True)

    import types
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    code = None
    status = 0
    try:
        try:
            if mode == 1:  # script
                path = argv[index]
                sys.argv = argv[index:]
                try:
                    with open(path, "rb") as f:
                        source = f.read()
                except OSError as e:
                    sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (argv[0], path, e.errno, e.strerror))
                    status = 2
                else:
                    import importlib.machinery
                    main.__file__ = path
                    main.__cached__ = None
                    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
                    code = compile(source, path, "exec")
            elif mode == 2:  # -c CODE
                sys.argv = ["-c"] + argv[index + 1:]
                main.__loader__ = __loader__
                code = compile(argv[index], "<string>", "exec")
            elif mode == 3:  # -m MODULE
                import runpy
                sys.argv = ["-m"] + argv[index + 1:]
                runpy._run_module_as_main(argv[index], alter_argv=True)
            elif mode == 4:  # program on stdin
                sys.argv = argv[index:] if index < len(argv) else [""]
                main.__loader__ = __loader__
                code = compile(sys.stdin.buffer.read(), "<stdin>", "exec")
            else:
                sys.stderr.write("cubicle: unknown warm mode %d\n" % mode)
                status = 126
            if code is not None:
                exec(code, main.__dict__)
        except SystemExit:
            raise
        except KeyboardInterrupt:
            _report(sys, sys.exc_info())
            _finish(os, sys)
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            status = 130
        except BaseException:
            _report(sys, sys.exc_info())
            status = 1
    except SystemExit as e:
        status = _exit_status(sys, e.code)
    status = _finish(os, sys) or status
    os._exit(status)


def _report(sys, info):
    # The traceback starts at the payload's own frames, as `python3 script`
    # shows it: the bootstrap's frame is dropped.
    kind, value, tb = info
    if tb is not None and tb.tb_frame.f_code is _run_as_main.__code__:
        tb = tb.tb_next
        if value is not None:
            value = value.with_traceback(tb)  # what the default hook prints
    sys.excepthook(kind, value, tb)


def _exit_status(sys, code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def _finish(os, sys):
    # What interpreter shutdown would do that a payload can see: wait for
    # non-daemon threads, run atexit handlers, flush stdio (a failed flush
    # is exit status 120, as in CPython).
    try:
        import threading
        threading._shutdown()
    except BaseException:  # noqa: BLE001
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except SystemExit as e:
        return _exit_status(sys, e.code)
    except BaseException:  # noqa: BLE001
        pass
    status = 0
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue  # closed by the payload (json.tool does): nothing to flush
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            status = 120
    return status


_cubicle_bootstrap()
