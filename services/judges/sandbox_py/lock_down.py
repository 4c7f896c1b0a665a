# Runs first in every sandbox of Run(), as uid 0 of the sandbox's own user namespace holding
# CAP_SYS_ADMIN, CAP_SYS_RESOURCE and CAP_SETPCAP in it (bwrap --cap-add): mounts the bounded
# /tmp (bwrap 0.8 has no --size), forbids nested user namespaces, then drops every capability
# for good and sets RLIMIT_NPROC (which, set here, counts this sandbox's processes only).
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


# seccomp_data.arch and the ptrace number, by machine.
_PTRACE = {"x86_64": (0xC000003E, 101), "aarch64": (0xC00000B7, 117)}


def _refuse_ptrace(prctl, ok):
    # A seccomp filter: ptrace kills the whole process (SIGSYS, which the service reports as a
    # blocked system call) instead of stopping a process of the sandbox, which would stall the
    # run until the wall clock. Calls of another ABI (x32, i386) get EPERM, so the filter cannot
    # be stepped around. Inherited by everything the code starts; no_new_privs is set already.
    arch = _PTRACE.get(os.uname().machine)
    if arch is None:
        return

    def op(code, jt, jf, k):  # struct sock_filter
        return code.to_bytes(2, sys.byteorder) + bytes((jt, jf)) + k.to_bytes(4, sys.byteorder)

    program = b"".join((
        op(0x20, 0, 0, 4),            # A = seccomp_data.arch
        op(0x15, 0, 5, arch[0]),      # another ABI: EPERM
        op(0x20, 0, 0, 0),            # A = seccomp_data.nr
        op(0x15, 2, 0, arch[1]),      # ptrace: kill
        op(0x35, 2, 0, 0x40000000),   # x32 numbers: EPERM
        op(0x06, 0, 0, 0x7FFF0000),   # SECCOMP_RET_ALLOW
        op(0x06, 0, 0, 0x80000000),   # SECCOMP_RET_KILL_PROCESS
        op(0x06, 0, 0, 0x00050001),   # SECCOMP_RET_ERRNO | EPERM
    ))
    import _ctypes

    class Byte(_ctypes._SimpleCData):
        _type_ = "B"

    class Program(_ctypes.Array):
        _type_ = Byte
        _length_ = len(program)

    instructions = Program.from_buffer_copy(program)
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}
    fprog = ((len(program) // 8).to_bytes(2, sys.byteorder) + bytes(6) +
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
    # No nested user namespaces: one would hand the code a fresh set of capabilities.
    fd = os.open("/proc/sys/user/max_user_namespaces", os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)
    # /proc/sys read-only: MS_BIND | MS_REC, then MS_REMOUNT | MS_BIND | ro,nosuid,nodev,noexec.
    ok(mount(b"/proc/sys", b"/proc/sys", None, 4096 | 16384, None), "bind /proc/sys")
    ok(mount(None, b"/proc/sys", None, 4096 | 32 | 1 | 2 | 4 | 8, None), "remount /proc/sys")
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
    _refuse_ptrace(prctl, ok)
    # struct rlimit {rlim_cur, rlim_max}, two 64-bit words.
    ok(function("setrlimit")(6, processes.to_bytes(8, sys.byteorder) * 2), "RLIMIT_NPROC")


_lock_down(_A[0], _A[1], _A[2])
os.write(3, b"S")
