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
# As `... -c <this> template FD OWNER MODULE...` it is a warm template's
# interpreter instead (runtime/warm_template.h): it imports the modules once
# and then forks, on each request of its owner, a child that joins a
# sandbox built for it and becomes that sandbox's warm interpreter.
#
# This file is embedded in the cubicle binary at build time; it must stay
# free of anything that writes outside the sandbox's own process.

def _cubicle_bootstrap():
    import os
    import socket
    import sys

    sock = socket.socket(fileno=int(sys.argv[1]))
    _cubicle_preload(os, sock, sys.argv[2:])
    sock.send(b"R")
    _cubicle_serve(sock)


# Imports the profile's modules, or says "E" and why on `sock` and exits.
def _cubicle_preload(os, sock, preload):
    try:
        import importlib
        for name in preload:
            importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - reported, then exit
        reason = "%s: %s" % (type(e).__name__, e)
        sock.send(b"E" + reason.encode("utf-8", "backslashreplace")[:240])
        os._exit(1)
    import io, threading, types  # noqa: F401 - what the hand-off needs, loaded ahead of it


# The one request, from `sock`: becomes it, and never returns.
def _cubicle_serve(sock):
    import os
    import socket
    import struct
    import sys

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
        # with the signal state of a fresh process. (Under the strict seccomp
        # policy this exec gets EPERM: a pool sends such requests to a cold
        # sandbox instead, whose one exec carries the sandbox's token.) Python ignores SIGPIPE
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

    _add_python_path(sys, os.environ.get("CUBICLE_PYTHON_PATH", ""))
    os._exit(_run_as_main(os, sys, [a.decode("utf-8", "surrogateescape") for a in argv], warm & 0xFF, warm >> 8))


# The folders the daemon puts on sys.path (a profile's or an environment's
# python_path: `pip install --target` folders), colon-separated in
# CUBICLE_PYTHON_PATH, since -I ignores PYTHONPATH. They go where
# PYTHONPATH's would: after the script's directory, which is not on
# sys.path at all under -I (safe_path).
def _add_python_path(sys, value):
    folders = [f for f in value.split(":") if f]
    if folders:
        at = 0 if sys.flags.isolated or getattr(sys.flags, "safe_path", False) else 1
        sys.path[at:at] = folders


# Runs the program as __main__ and returns its exit status. A rehearsal
# (rehearsal=True) runs no exit handlers: the interpreter's real run does.
def _run_as_main(os, sys, argv, mode, index, rehearsal=False):
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
            _finish(os, sys, rehearsal)
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            status = 130
        except BaseException:
            _report(sys, sys.exc_info())
            status = 1
    except SystemExit as e:
        status = _exit_status(sys, e.code)
    return _finish(os, sys, rehearsal) or status


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


def _finish(os, sys, rehearsal=False):
    # What interpreter shutdown would do that a payload can see: wait for
    # non-daemon threads, run atexit handlers, flush stdio (a failed flush
    # is exit status 120, as in CPython).
    # Each only where there is something to do: the modules a payload did
    # not use stay untouched (in a template's child, a first touch is a
    # page copy).
    if not rehearsal and "threading" in sys.modules:
        try:
            threading = sys.modules["threading"]
            if len(threading._active) > 1 or threading._shutdown_locks:
                threading._shutdown()
        except BaseException:  # noqa: BLE001
            pass
    if not rehearsal:
        try:
            import atexit
            if atexit._ncallbacks():
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


# ---- Template mode (runtime/warm_template.h) --------------------------------

# The control message (namespaces/control.h) the template sends for each
# interpreter it forked, whose parent it is (init is not): type, payload
# pid, wait status, flags, struct rusage, the step stamps, the error record
# (step, detail, errno). runtime/warm_template.cc checks the C++ layout
# against this size at build time.
_CONTROL = "=IiiI" + "qqqq" + "14q" + "7q" + "64s256si4x"
_SETUP_ERROR, _PAYLOAD_EXITED = 1, 3
# The sandbox's namespaces, in the order the owner sends their fds
# (runtime/warm_template.h): mount, uts, ipc, net and cgroup, which the
# interpreter joins, and pid, which the template joins for its next child
# (a process never changes its own). The user namespace is the template's.
_JOINED = (("mnt", 0x00020000), ("uts", 0x04000000), ("ipc", 0x08000000), ("net", 0x40000000),
           ("cgroup", 0x02000000), ("pid", 0x20000000))


def _cubicle_template():
    import ctypes
    import gc
    import os
    import select
    import socket
    import sys
    # What the children need, imported once here rather than in each.
    import fcntl, random, resource, signal, struct  # noqa: E401,F401

    init = socket.socket(fileno=int(sys.argv[2]))
    owner = socket.socket(fileno=int(sys.argv[3]))
    _cubicle_preload(os, init, sys.argv[4:])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    init.send(b"R")
    init.close()
    plan = _template_plan(owner.recv(1 << 20))
    # Each child's parent-death signal is bound to this process; a child
    # learns whether this process was still there when it took effect from
    # this pipe, whose writing end only this process holds (its pid is not
    # one the child can see).
    alive, holder = os.pipe2(os.O_CLOEXEC)
    os.set_inheritable(alive, True)
    # The interpreters this process forked: pidfd -> (pid, control socket).
    # Only a parent learns its child's exit status, so this process reports
    # each one's end on the zygote's control socket, as init reports a
    # payload's.
    children = {}
    poller = select.poll()
    poller.register(owner.fileno(), select.POLLIN)
    # The report's path, walked once ahead of the first report.
    _send_control(os, -1, _PAYLOAD_EXITED, usage=resource.getrusage(resource.RUSAGE_SELF), dry=True)
    # What is allocated so far stays out of the collector's way, so that
    # its passes in the children do not write (and unshare) those pages.
    gc.freeze()
    while True:
        for fd, _ in poller.poll():
            if fd in children:
                _template_reap(os, poller, children, fd)
                continue
            data, fds, _, _ = socket.recv_fds(owner, 64, 32)
            if not data:
                os._exit(0)  # the owner is gone: the children die with this process
            _template_spawn(os, libc, plan, owner, alive, poller, children, data, fds)


# One spawn request: the zygote's namespaces, its interpreter socket, its
# control socket, and the files that join its groups. The child is forked
# into the zygote's pid namespace; it joins the rest itself.
def _template_spawn(os, libc, plan, owner, alive, poller, children, data, fds):
    import ctypes
    joined = len(_JOINED)
    if data[:1] != b"S" or len(fds) < joined + 2:
        for fd in fds:
            os.close(fd)
        return
    control = fds[joined + 1]
    if libc.setns(fds[joined - 1], _JOINED[-1][1]) != 0:
        err = ctypes.get_errno()
        _send_control(os, control, _SETUP_ERROR, step="setns", detail="pid", err=err)
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:
        # The other children's pidfds and control sockets are closed with
        # every other inherited fd, before "R" (_template_payload).
        owner.close()
        _template_payload(libc, plan, fds, alive)
    for fd in fds:
        if fd != control:
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = (pid, control)
    poller.register(pidfd, 1)  # POLLIN


# A child has ended: its status and resource use go to its zygote's init
# (a launcher that is gone reads nothing; the write fails quietly).
def _template_reap(os, poller, children, pidfd):
    pid, control = children.pop(pidfd)
    poller.unregister(pidfd)
    os.close(pidfd)
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    _send_control(os, control, _PAYLOAD_EXITED, status=status, usage=usage)
    os.close(control)


# The owner's setup: 'P', new session (byte), the rlimits (count, then
# resource, soft, hard each), the seccomp program (count of 8-byte
# instructions, then them).
def _template_plan(data):
    import struct
    if data[:1] != b"P":
        raise SystemExit(2)
    new_session, count = struct.unpack_from("=BI", data, 1)
    at = 6
    rlimits = []
    for _ in range(count):
        rlimits.append(struct.unpack_from("=iQQ", data, at))
        at += struct.calcsize("=iQQ")
    (length,) = struct.unpack_from("=I", data, at)
    at += 4
    # The kernel's structures, built once here rather than in each child:
    # capset's header and empty sets, and the filter's sock_fprog.
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    if len(data) != at + 8 * length:
        raise SystemExit(2)
    seccomp = None
    if length > 0:
        instructions = ctypes.create_string_buffer(data[at:at + 8 * length], 8 * length)
        seccomp = Program(length, ctypes.cast(instructions, ctypes.c_void_p))
        seccomp._instructions = instructions  # kept alive with the program
    return {"new_session": bool(new_session), "rlimits": rlimits,
            "capset": (Header(0x20080522, 0), (Data * 2)()), "seccomp": seccomp}


def _send_control(os, control, kind, status=0, usage=None, step="", detail="", err=0, dry=False):
    import struct
    times = [0, 0, 0, 0]
    counts = [0] * 14
    if usage is not None:
        times = [int(usage.ru_utime), int((usage.ru_utime % 1) * 1e6),
                 int(usage.ru_stime), int((usage.ru_stime % 1) * 1e6)]
        counts = [usage.ru_maxrss, usage.ru_ixrss, usage.ru_idrss, usage.ru_isrss, usage.ru_minflt,
                  usage.ru_majflt, usage.ru_nswap, usage.ru_inblock, usage.ru_oublock, usage.ru_msgsnd,
                  usage.ru_msgrcv, usage.ru_nsignals, usage.ru_nvcsw, usage.ru_nivcsw]
    message = struct.pack(_CONTROL, kind, 0, status, 0, *times, *counts, *([0] * 7),
                          step.encode()[:63], detail.encode()[:255], err)
    if dry:
        return
    try:
        os.write(control, message)
    except OSError:
        pass  # the launcher is gone


# A request's path, walked once with a program that does nothing and stdio
# on /dev/null: this interpreter is a fork of its template's, and the first
# write to each page they share copies it. Those copies (hundreds, tens of
# microseconds each on a virtual machine) are taken now, before "R", not on
# the request's path.
def _rehearse(os, sys):
    saved = (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__, sys.argv,
             sys.modules.get("__main__"))
    try:
        _run_as_main(os, sys, ["python3", "-c", "pass"], 2, 2, rehearsal=True)
    finally:
        (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__, sys.argv,
         main) = saved
        sys.modules["__main__"] = main


def _check(libc, result, step):
    import ctypes
    if result != 0:
        raise OSError(ctypes.get_errno(), step)


# The interpreter of one sandbox, forked into its pid namespace: it joins
# the sandbox's groups and other namespaces, does the payload's hygiene
# (namespaces/process.cc: DropAllCapabilities and its neighbours, in the
# same order) with fresh random state, then says "R" with its credentials
# to init and takes the request as any warm interpreter does. Setup
# failures go to the launcher as init's own do.
def _template_payload(libc, plan, fds, parent_alive):
    import ctypes
    import fcntl
    import os
    import random
    import select
    import resource
    import signal
    import socket
    import struct
    import sys
    joined = len(_JOINED)
    namespaces, warm, control, groups = fds[:joined], fds[joined], fds[joined + 1], fds[joined + 2:]
    step, detail = "prctl(PR_SET_PDEATHSIG)", "warm interpreter"
    try:
        _check(libc, libc.prctl(1, signal.SIGKILL, 0, 0, 0), step)
        if select.select([parent_alive], [], [], 0)[0]:
            os._exit(1)  # the template is gone: its end of the pipe closed
        os.close(parent_alive)
        step = "join cgroup"
        for fd in groups:
            os.write(fd, b"0")
            os.close(fd)
        step = "setns"
        for fd, (name, kind) in zip(namespaces, _JOINED):
            if kind != 0x20000000:  # the pid namespace: the template's for this process
                detail = name
                _check(libc, libc.setns(fd, kind), step)
            os.close(fd)
        detail = "warm interpreter"
        if plan["new_session"]:
            step = "setsid"
            os.setsid()
        step = "setrlimit"
        for res, soft, hard in plan["rlimits"]:
            resource.setrlimit(res, (soft, hard))
        step = "close fds"
        # Out of the way first: either may be 3 or 4 already.
        warm = fcntl.fcntl(warm, fcntl.F_DUPFD_CLOEXEC, 10)
        control = fcntl.fcntl(control, fcntl.F_DUPFD_CLOEXEC, 10)
        os.dup2(warm, 3, inheritable=False)
        os.dup2(control, 4, inheritable=False)
        control = 4
        os.closerange(5, os.sysconf("SC_OPEN_MAX"))
        # What a sibling could have predicted: each child's own.
        random.seed()
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:
            numpy_random.seed()
        step = "prctl(PR_SET_SECUREBITS)"
        _check(libc, libc.prctl(28, 0xEF, 0, 0, 0), step)
        step = "prctl(PR_CAPBSET_DROP)"
        for cap in range(64):
            if libc.prctl(24, cap, 0, 0, 0) != 0:
                if ctypes.get_errno() == 22:  # EINVAL: past the last capability
                    break
                raise OSError(ctypes.get_errno(), step)
        step = "prctl(PR_CAP_AMBIENT_CLEAR_ALL)"
        if libc.prctl(47, 4, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            raise OSError(ctypes.get_errno(), step)
        step = "capset"
        header, data = plan["capset"]
        _check(libc, libc.capset(ctypes.byref(header), data), step)
        step = "prctl(PR_SET_NO_NEW_PRIVS)"
        _check(libc, libc.prctl(38, 1, 0, 0, 0), step)
        if plan["seccomp"] is not None:
            step = "seccomp(SECCOMP_SET_MODE_FILTER)"
            _check(libc, libc.prctl(22, 2, ctypes.addressof(plan["seccomp"]), 0, 0), step)
    except OSError as e:
        _send_control(os, control, _SETUP_ERROR, step=step, detail=detail, err=e.errno or 0)
        os._exit(127)
    except BaseException as e:  # noqa: BLE001 - reported, then exit
        _send_control(os, control, _SETUP_ERROR, step=step, detail=repr(e)[:200])
        os._exit(127)
    _rehearse(os, sys)
    sock = socket.socket(fileno=3)
    credentials = struct.pack("=iII", os.getpid(), os.getuid(), os.getgid())
    sock.sendmsg([b"R"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, credentials)])
    os.close(4)  # the control socket: gone before any of the request's code runs
    _cubicle_serve(sock)


if __import__("sys").argv[1:2] == ["template"]:
    _cubicle_template()
else:
    _cubicle_bootstrap()
