# Runs first in every sandbox of Run(), as uid 0 of the sandbox's own user namespace holding
# CAP_SYS_ADMIN, CAP_SYS_RESOURCE and CAP_SETPCAP in it (bwrap --cap-add): mounts the bounded
# /tmp (bwrap 0.8 has no --size), forbids nested user namespaces, then drops every capability
# for good, installs a seccomp filter and sets RLIMIT_NPROC (which, set here, counts this
# sandbox's processes only).
# argv: tmp_bytes tmp_inodes processes memory_bytes cpu_seconds result_bytes.
import os, sys
_A = [int(a) for a in sys.argv[1:]]


def _libc():
    # The C half of ctypes (_ctypes) on its own: `import ctypes` costs several milliseconds of
    # every run. Arguments are ints, bytes (char*, read only) and None (NULL).
    try:
        import _ctypes

        class Int(_ctypes._SimpleCData):
            _type_ = "i"

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        class Library:
            _handle = _ctypes.dlopen(None)

        library = Library()
        return (lambda name: Function((name, library))), _ctypes.get_errno
    except Exception:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return (lambda name: getattr(libc, name)), ctypes.get_errno


# seccomp_data.arch and the numbers of ptrace, clone, unshare and clone3, by machine.
_SYSCALLS = {
    "x86_64": (0xC000003E, {"ptrace": 101, "clone": 56, "unshare": 272, "clone3": 435}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "clone": 220, "unshare": 97, "clone3": 435}),
}
_CLONE_NEWUSER = 0x10000000


def _seccomp(prctl, ok):
    # A seccomp filter, inherited by everything the code starts (no_new_privs is set already):
    # - ptrace kills the whole process (SIGSYS, which the service reports as a blocked system
    #   call) instead of stopping a process of the sandbox, which would stall the run until the
    #   wall clock;
    # - unshare and clone asking for a user namespace get EPERM: a nested one would hand the
    #   code a fresh set of capabilities. max_user_namespaces says the same where the sandbox
    #   has a /proc; without one this rule is all there is. clone3 passes its flags in memory a
    #   filter cannot read, so it gets ENOSYS and the C library falls back to clone;
    # - calls of another ABI (x32, i386) get EPERM, so the filter cannot be stepped around.
    machine = _SYSCALLS.get(os.uname().machine)
    if machine is None:
        return
    arch, nr = machine
    ALLOW, KILL, EPERM, ENOSYS = 0x7FFF0000, 0x80000000, 0x00050001, 0x00050026
    # (code, true label, false label, k), struct sock_filter with labels for the jumps.
    program = [
        (0x20, None, None, 4),                   # A = seccomp_data.arch
        (0x15, None, "eperm", arch),             # another ABI: EPERM
        (0x20, None, None, 0),                   # A = seccomp_data.nr
        (0x15, "kill", None, nr["ptrace"]),
        (0x35, "eperm", None, 0x40000000),       # x32 numbers: EPERM
        (0x15, "enosys", None, nr["clone3"]),
        (0x15, "flags", None, nr["clone"]),
        (0x15, "flags", "allow", nr["unshare"]),
        ("flags", 0x20, None, None, 16),         # A = low word of args[0] (little-endian)
        (0x45, "eperm", "allow", _CLONE_NEWUSER),
        ("allow", 0x06, None, None, ALLOW),
        ("kill", 0x06, None, None, KILL),
        ("eperm", 0x06, None, None, EPERM),
        ("enosys", 0x06, None, None, ENOSYS),
    ]
    program = [op if isinstance(op[0], str) else (None,) + op for op in program]
    where = {op[0]: i for i, op in enumerate(program) if op[0] is not None}

    def jump(at, label):
        return 0 if label is None else where[label] - at - 1

    code = b"".join(
        c.to_bytes(2, sys.byteorder) + bytes((jump(i, jt), jump(i, jf))) +
        k.to_bytes(4, sys.byteorder)
        for i, (_, c, jt, jf, k) in enumerate(program))
    import _ctypes

    class Byte(_ctypes._SimpleCData):
        _type_ = "B"

    class Program(_ctypes.Array):
        _type_ = Byte
        _length_ = len(code)

    instructions = Program.from_buffer_copy(code)
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}
    fprog = ((len(program)).to_bytes(2, sys.byteorder) + bytes(6) +
             _ctypes.addressof(instructions).to_bytes(8, sys.byteorder))
    ok(prctl(22, 2, fprog, 0, 0), "PR_SET_SECCOMP")


def _lock_down(tmp_bytes, tmp_inodes, processes):
    function, get_errno = _libc()
    mount, prctl = function("mount"), function("prctl")

    def ok(rc, what):
        if rc != 0:
            e = get_errno()
            raise OSError(e, "%s: %s" % (what, os.strerror(e)))

    # MS_NOSUID | MS_NODEV: a /tmp that cannot grow past its size and inode count.
    ok(mount(b"tmpfs", b"/tmp", b"tmpfs", 2 | 4,
             b"size=%d,nr_inodes=%d,mode=1777" % (tmp_bytes, tmp_inodes)), "mount /tmp")
    # Where the sandbox has a /proc (PythonSandbox::Options::proc): no nested user namespaces
    # (the seccomp filter below refuses them too), and /proc/sys read-only.
    if os.path.isdir("/proc/sys"):
        fd = os.open("/proc/sys/user/max_user_namespaces", os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
        # MS_BIND | MS_REC, then MS_REMOUNT | MS_BIND | ro,nosuid,nodev,noexec.
        ok(mount(b"/proc/sys", b"/proc/sys", None, 4096 | 16384, None), "bind /proc/sys")
        ok(mount(None, b"/proc/sys", None, 4096 | 32 | 1 | 2 | 4 | 8, None),
           "remount /proc/sys")
    # Securebits (uid 0 gains nothing on exec; locked), then the bounding set, the ambient set,
    # permitted/effective/inheritable (capset v3, all zero), and no new privileges.
    ok(prctl(28, 0xEF, 0, 0, 0), "PR_SET_SECUREBITS")
    for cap in range(64):
        if prctl(24, cap, 0, 0, 0) != 0 and get_errno() != 22:
            ok(-1, "PR_CAPBSET_DROP")
    ok(prctl(47, 4, 0, 0, 0), "PR_CAP_AMBIENT_CLEAR_ALL")
    ok(function("capset")(0x20080522.to_bytes(4, sys.byteorder) + bytes(4), bytes(24)),
       "capset")
    ok(prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    _seccomp(prctl, ok)
    # struct rlimit {rlim_cur, rlim_max}, two 64-bit words.
    ok(function("setrlimit")(6, processes.to_bytes(8, sys.byteorder) * 2), "RLIMIT_NPROC")


_lock_down(_A[0], _A[1], _A[2])
os.write(3, b"S")
