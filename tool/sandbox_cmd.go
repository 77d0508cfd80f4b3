package tool

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sandboxUID is the uid (and gid) the code sees inside its user namespace: "nobody".
const sandboxUID = "65534"

// hostRootEntries are the top-level paths a merged-/usr Debian system links into /usr, or that
// older layouts keep as real directories. Each is recreated inside the sandbox exactly as the
// host has it (a symlink, or a read-only bind), so the dynamic loader finds its libraries.
var hostRootEntries = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// rootLayout returns the bwrap arguments that rebuild the read-only part of the file system:
// /usr and the library and binary directories, and nothing else of the host. /etc, /home,
// /root, /work and the rest simply do not exist inside.
func rootLayout() []string {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, p := range hostRootEntries {
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				continue
			}
			args = append(args, "--symlink", target, p)
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	return args
}

// bwrapArgs is the full bubblewrap command line for one run. The namespaces: a new user
// namespace (the code runs as uid 65534 and holds no capability on the host), and new
// network, pid, ipc, uts and cgroup namespaces (--unshare-all): the only network device is a
// loopback that is down, the code sees only its own processes, and when the sandbox's init
// dies the kernel kills every process left in it.
func (s *Sandbox) bwrapArgs() []string {
	l := s.limits
	args := []string{
		"--unshare-all", "--unshare-user",
		"--uid", sandboxUID, "--gid", sandboxUID,
		"--disable-userns", // no nested namespaces: the code cannot regain capabilities
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
		"--clearenv",
		"--setenv", "PATH", "/usr/bin:/bin",
		"--setenv", "HOME", "/tmp",
		"--setenv", "LANG", "C.UTF-8",
	}
	args = append(args, s.layout...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--perms", "1777", "--size", strconv.FormatInt(l.TmpBytes, 10), "--tmpfs", "/tmp",
		// bwrap builds the root and /dev as tmpfs mounts the sandbox user owns; left writable
		// they would be writable outside /tmp and, worse, unbounded memory.
		"--remount-ro", "/dev",
		"--remount-ro", "/",
		"--chdir", "/tmp",
		"--", s.python, "-I", "-B", "-c", s.bootstrap(),
	)
	return args
}

// bootstrap is the trusted Python prologue run inside the sandbox before the code. It sets
// the resource limits from inside the user namespace, which is what makes RLIMIT_NPROC bind:
// the kernel counts tasks per (namespace, uid), so the count is the sandbox's own processes,
// whatever else runs on the host. It then reads the code from stdin, points stdin at
// /dev/null, reports readiness on fd 3 and closes every inherited descriptor above 2, so the
// code cannot forge that report. A traceback leaves out the bootstrap's own frame.
func (s *Sandbox) bootstrap() string {
	l := s.limits
	return fmt.Sprintf(`import os, sys, resource as R
for k, v in ((R.RLIMIT_CPU, %d), (R.RLIMIT_AS, %d), (R.RLIMIT_NPROC, %d), (R.RLIMIT_FSIZE, %d), (R.RLIMIT_NOFILE, %d), (R.RLIMIT_CORE, 0)):
    R.setrlimit(k, (v, v + 1 if k == R.RLIMIT_CPU else v))
src = sys.stdin.buffer.read()
fd = os.open("/dev/null", os.O_RDONLY)
os.dup2(fd, 0)
os.close(fd)
sys.stdin = open(0, closefd=False)
os.write(3, b"ok")
os.closerange(3, 65536)
del fd, k, v, R
sys.argv = ["main.py"]
g = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(src, "main.py", "exec"), g)
except SystemExit:
    raise
except BaseException as e:
    import traceback
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
`, l.CPUSeconds, l.MemoryBytes, l.Processes, l.FileBytes, l.OpenFiles)
}

// checkUnderMounts reports whether path lies under a directory the sandbox mounts, so the
// interpreter named in the command line exists inside.
func checkUnderMounts(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("interpreter path %q is not absolute", path)
	}
	clean := filepath.Clean(path)
	for _, dir := range append([]string{"/usr"}, hostRootEntries...) {
		if strings.HasPrefix(clean, dir+"/") {
			return nil
		}
	}
	return fmt.Errorf("interpreter %q is outside the directories the sandbox mounts (/usr, /bin, /lib…)", path)
}
