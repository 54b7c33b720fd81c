package agent_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/privtest"
)

// gpuOp sends one GPU accounting op on a raw host connection and returns
// the memory in use its reply reports.
func gpuOp(t *testing.T, uc *net.UnixConn, id uint64, op wire.Op, body []byte) uint64 {
	t.Helper()
	in := make([]byte, wire.MaxMessage)
	n, err := rawStatus(t, uc, in, &wire.Request{Header: wire.Header{Op: op, ID: id}, Data: body}, 30*time.Second)
	if err != nil {
		t.Fatalf("gpu op %v: %v %s", op, err, in[wire.HeaderLen:n])
	}
	var lim hookwire.Limits
	if err := lim.Decode(in[wire.HeaderLen:n]); err != nil {
		t.Fatal(err)
	}
	return lim.MemoryUsed
}

// TestHelperGPUProcess is not a test: TestGPUAccountsSurvivePidReuse runs
// this test binary as GPU processes. DPU_TEST_GPU_MODE:
//
//	hog    connects to DPU_TEST_HOST_SOCKET, opens its GPU account, starts
//	       itself as "child" with the connection, prints "hog PID" and exits
//	child  on a line on standard input, reports 40 GiB in use on the
//	       connection it was given and prints "child used N"
//	root   connects, opens its account, prints "root PID used N"; on every
//	       line on standard input asks again and prints "root used N"
func TestHelperGPUProcess(t *testing.T) {
	mode := os.Getenv("DPU_TEST_GPU_MODE")
	if mode == "" {
		t.Skip("helper process only")
	}
	dev := hookwire.Device{Ordinal: 0}
	dial := func() *net.UnixConn {
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: os.Getenv("DPU_TEST_HOST_SOCKET"), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := uc.Write(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})); err != nil {
			t.Fatal(err)
		}
		if _, err := uc.Read(make([]byte, wire.MaxMessage)); err != nil {
			t.Fatal(err)
		}
		return uc
	}
	switch mode {
	case "hog":
		uc := dial()
		gpuOp(t, uc, 2, wire.OpGPUMemLimit, hookwire.AppendDevice(nil, dev))
		f, err := uc.File()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperGPUProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DPU_TEST_GPU_MODE=child")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("hog %d\n", os.Getpid())
	case "child":
		f := os.NewFile(3, "host connection")
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		uc := c.(*net.UnixConn)
		fmt.Println("child ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		used := gpuOp(t, uc, 3, wire.OpGPUMemUpdate, hookwire.AppendUpdate(nil, dev, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 40 << 30, Total: 40 << 30}))
		fmt.Printf("child used %d\n", used)
	case "root":
		uc := dial()
		used := gpuOp(t, uc, 2, wire.OpGPUMemLimit, hookwire.AppendDevice(nil, dev))
		fmt.Printf("root %d used %d\n", os.Getpid(), used)
		in := bufio.NewReader(os.Stdin)
		for id := uint64(3); ; id++ {
			if _, err := in.ReadString('\n'); err != nil {
				return
			}
			fmt.Printf("root used %d\n", gpuOp(t, uc, id, wire.OpGPUMemLimit, hookwire.AppendDevice(nil, dev)))
		}
	}
}

// pidNSEnv marks the test binary run as the first process of a PID
// namespace of its own (inPIDNamespace).
const pidNSEnv = "DPU_TEST_PIDNS"

// inPIDNamespace runs test (this test binary's test of that name) again as
// the first process of a new PID and mount namespace, with /proc mounted
// for it, and reports whether it could: there no other process takes the
// pids the test chooses with ns_last_pid. In that process (pidNSEnv set)
// it mounts /proc and reports false: the test runs its body.
func inPIDNamespace(t *testing.T, test string) bool {
	t.Helper()
	if os.Getenv(pidNSEnv) != "" {
		if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			t.Fatalf("in the PID namespace: making mounts private: %v", err)
		}
		if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			t.Fatalf("in the PID namespace: mounting /proc: %v", err)
		}
		return false
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), pidNSEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Logf("no PID namespace of its own (%v): running here, where other processes may take the pid", err)
		return false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill() // its namespace, and every process in it, ends with it
		err = <-done
		t.Errorf("the test in its PID namespace did not end within 3 minutes")
	}
	t.Logf("in a PID namespace of its own:\n%s", out.String())
	switch {
	case err != nil:
		t.Fatalf("the test in its PID namespace: %v", err)
	case strings.Contains(out.String(), "--- SKIP"):
		t.Fatal("the test skipped in its PID namespace")
	case !strings.Contains(out.String(), "--- PASS: "+test):
		t.Fatal("the test did not run in its PID namespace")
	}
	return true
}

// TestGPUAccountsSurvivePidReuse (hole 6): a user's process opens a GPU
// account, hands its connection to a child and exits; root's GPU process
// then gets the same pid (the test sets ns_last_pid); the child reports
// 40 GiB on the old connection. Root's process must see none of it: the
// accounts follow the processes (pid and start time, read as the host
// socket accepted each connection), not the pid.
//
// It runs as the first process of a PID namespace of its own, agent
// included, so that no other process of the machine can take the pid it
// chooses; where no namespace can be made it runs here and retries. Only
// when ns_last_pid cannot be written (not root in the PID namespace's
// user namespace) or another process takes the pid 50 times over is the
// pid reuse impossible to arrange, and then it skips, or fails under
// DPU_PRIV_TESTS=require.
func TestGPUAccountsSurvivePidReuse(t *testing.T) {
	privtest.Require(t)
	if inPIDNamespace(t, "TestGPUAccountsSurvivePidReuse") {
		return
	}
	cannot := func(format string, args ...any) {
		t.Helper()
		if os.Getenv(privtest.Env) == "require" {
			t.Fatalf(format+" (%s=require)", append(args, privtest.Env)...)
		}
		t.Skipf(format, args...)
	}
	const uid = 4242
	nodes := startLine(t, 1, func(c *agent.Config) {
		c.SocketGroup = strconv.Itoa(permGroup)
		c.GPU.Default.Memory = 8 << 30
	})
	sock := nodes[0].hostSocket()
	dir, err := os.MkdirTemp("", "agent-gpu-pid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := testBinaryIn(t, dir)
	// helper starts the helper in mode; its lines come on the returned
	// channel, and a line written to in reaches its standard input.
	helper := func(mode string, cred *syscall.Credential) (cmd *exec.Cmd, lines <-chan string, in *os.File) {
		t.Helper()
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(bin, "-test.run=^TestHelperGPUProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DPU_TEST_HOST_SOCKET="+sock, "DPU_TEST_GPU_MODE="+mode)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		inR.Close()
		outW.Close()
		ch := make(chan string, 16)
		go func() {
			defer close(ch)
			sc := bufio.NewScanner(outR)
			for sc.Scan() {
				ch <- sc.Text()
			}
		}()
		t.Cleanup(func() {
			inW.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			outR.Close()
		})
		return cmd, ch, inW
	}
	next := func(lines <-chan string, prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("helper ended before %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no %q from the helper", prefix)
			}
		}
	}

	hog, hogLines, childIn := helper("hog", &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{permGroup}})
	pid, err := strconv.Atoi(strings.Fields(next(hogLines, "hog "))[1])
	if err != nil {
		t.Fatal(err)
	}
	next(hogLines, "child ready")
	if err := hog.Wait(); err != nil {
		t.Fatalf("hog: %v", err)
	}
	// root's process takes the hog's pid: the next pid after pid-1
	var rootLines <-chan string
	var rootIn *os.File
	for try := 0; ; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			cannot("cannot choose the next pid: writing ns_last_pid needs CAP_SYS_ADMIN in the user namespace owning the PID namespace: %v", err)
		}
		cmd, lines, in := helper("root", nil)
		if cmd.Process.Pid == pid {
			rootLines, rootIn = lines, in
			t.Logf("root's process got pid %d, the exited hog's, at try %d", pid, try+1)
			break
		}
		if try == 50 {
			cannot("pid %d went to another process 50 times (a busy machine, and no PID namespace of the test's own)", pid)
		}
	}
	if got, want := next(rootLines, "root "), fmt.Sprintf("root %d used 0", pid); got != want {
		t.Fatalf("root's process: %q, want %q", got, want)
	}
	fmt.Fprintln(childIn)
	t.Log(next(hogLines, "child used "))
	fmt.Fprintln(rootIn)
	if got := next(rootLines, "root used "); got != "root used 0" {
		t.Fatalf("root's process (pid %d, as the exited hog's) after the hog's child reported 40 GiB on the hog's connection: %q, want \"root used 0\"", pid, got)
	}
}
