//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// soakParam reads a soak setting from the environment (`make soak` sets them).
func soakParam(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want a count", name, v)
		}
		return n
	}
	return def
}

// TestSoak cycles pods — run, create and start a container, stop, remove — on every ready
// handler with concurrent workers, as kubelet would, while the daemon is killed with -9 and
// restarted. Each worker also keeps a resident pod with a running container for the whole
// run. After each restart every worker checks everything it was told exists: each pod's
// state (PodSandboxStatus: READY, or NOTREADY once stopped, as its last answered call
// left it), each container's (ContainerStatus), and that a running container runs (an
// ExecSync echo); one that is missing or in another state is lost. A worker whose call
// fails (the daemon was down) does that check, where the call it was in may have gone
// either way, then removes its cycling pods, as kubelet relists and removes pods it no
// longer wants, and goes on. Afterwards the residents are checked once more and removed,
// and the node is compared with before. `make test` runs a short
// soak; `make soak` a long one (RTSHIMD_SOAK_CYCLES, _KILLS, _WORKERS).
func TestSoak(t *testing.T) {
	cycles := soakParam(t, "RTSHIMD_SOAK_CYCLES", 24)
	kills := soakParam(t, "RTSHIMD_SOAK_KILLS", 2)
	workers := soakParam(t, "RTSHIMD_SOAK_WORKERS", 3)
	e := newContainerEnv(t)
	n := writeNetwork(t, e)
	st, err := e.d.RS.Status(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	var handlers []string
	for _, h := range st.RuntimeHandlers {
		if h.Name != "" {
			handlers = append(handlers, h.Name)
		}
	}
	if len(handlers) == 0 {
		t.Fatal("no ready handler")
	}
	before := e.nodeState(n, handlers...)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// transitions counts kills and restarts (two per kill): a call may fail only if it
	// overlapped one.
	var next, done, retried, transitions atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	// Every worker connects before the first kill.
	var sws []*soakWorker
	for w := 0; w < workers; w++ {
		sw, err := newSoakWorker(ctx, e, w, &transitions)
		if err != nil {
			t.Fatal(err)
		}
		if err := sw.startResident(ctx, handlers[w%len(handlers)]); err != nil {
			t.Fatal(err)
		}
		sws = append(sws, sw)
	}
	for w, sw := range sws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(cycles) {
					return
				}
				ok, err := sw.cycle(ctx, handlers[i%int64(len(handlers))], int(i))
				if err != nil {
					errs <- fmt.Errorf("worker %d, cycle %d: %w", w, i, err)
					return
				}
				if ok {
					done.Add(1)
				} else {
					retried.Add(1)
				}
			}
		}()
	}
	// Kills while the workers run: spread over the run by its progress (the k-th once
	// k/(kills+1) of the cycles are done, so a fast machine does not finish first), each at
	// a random moment after that, mid-call most often.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	killed := 0
	for killed < kills {
		due := int64((killed + 1) * cycles / (kills + 1))
		select {
		case <-finished:
		case <-time.After(20 * time.Millisecond):
			if done.Load()+retried.Load() < due {
				continue
			}
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
			transitions.Add(1)
			e.d.Kill()
			e.d.Start()
			transitions.Add(1)
			killed++
			continue
		}
		break
	}
	<-finished
	close(errs)
	for err := range errs {
		t.Error(err)
		logLost(t, e.d, err)
	}
	// The last restart, checked by every worker whatever it was doing; then the
	// residents go.
	var checks, execs int
	for _, sw := range sws {
		sw.checked = -1
		if err := sw.retryUnavailable(ctx, func() error { return sw.checkAfterRestart(ctx) }); err != nil {
			t.Errorf("worker %d, after the soak: %v", sw.w, err)
			logLost(t, e.d, err)
		}
		if err := sw.retryUnavailable(ctx, func() error { return sw.removePod(ctx, sw.resident) }); err != nil {
			t.Errorf("worker %d: remove its resident pod: %v", sw.w, err)
		}
		checks += sw.checks
		execs += sw.execs
	}
	t.Logf("soak: %d cycles on %v by %d workers, %d completed without a failed call, %d redone after one; daemon killed %d times; %d checks of every pod and container after a restart, %d execs in running containers",
		cycles, handlers, workers, done.Load(), retried.Load(), killed, checks, execs)
	if killed < kills {
		t.Errorf("the workers finished before %d kills (%d): make the soak longer", kills, killed)
	}

	var after map[string][]string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if after = e.nodeState(n, handlers...); maps2Equal(before, after) {
			break
		}
	}
	if !maps2Equal(before, after) {
		t.Errorf("after the soak the node differs:\n%s", stateDiff(before, after))
	}
}

// soakWorker is one kubelet-like client with its own connection, which reconnects by
// itself when the daemon comes back.
type soakWorker struct {
	e  *containerEnv
	w  int
	rs internalapi.RuntimeService
	// alive are the pods and containers the daemon said it made and that were not
	// removed since, with the state the worker expects each in.
	alive map[string]*soakObject
	// resident is the pod the worker keeps for the whole soak.
	resident string
	// transitions counts the daemon's kills and restarts; checked is the count when the
	// worker last checked alive.
	transitions *atomic.Int64
	checked     int64
	// checks and execs count the checks after a restart and the execs they ran.
	checks, execs int
}

// soakObject is a pod or a container as the worker expects it.
type soakObject struct {
	pod string // its pod's ID (its own, for a pod)
	ctr bool
	// state is what the last answered call left (a PodSandboxState or ContainerState);
	// next, unless none, what the call under way would leave: until it is answered, the
	// object may be in either.
	state, next int32
	// failed is the error of the last call on it that failed, said when it is lost.
	failed error
	// shimV2 is set for a container of a shim-v2 row: the shim cancels a start whose
	// caller's connection drops (ttrpc ends a connection's requests with it), as the
	// daemon's does when it is killed, and runc start killed mid-way can end the
	// container before it runs (runc init exited 1 where this soak found it).
	// containerd's tasks do the same. Such a container may be EXITED after a start the
	// daemon died in.
	shimV2 bool
}

const none = -1

func newSoakWorker(ctx context.Context, e *containerEnv, w int, transitions *atomic.Int64) (*soakWorker, error) {
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + e.d.Socket).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		return nil, err
	}
	return &soakWorker{e: e, w: w, rs: rs, alive: map[string]*soakObject{}, transitions: transitions, checked: transitions.Load()}, nil
}

// startResident runs the worker's resident pod, with a running container, on handler.
func (s *soakWorker) startResident(ctx context.Context, handler string) error {
	name := fmt.Sprintf("soak-resident-%d", s.w)
	pod := podConfig(name, runtimeapi.NamespaceMode_CONTAINER)
	pod.LogDirectory = filepath.Join(s.e.logs, name)
	podID, err := s.rs.RunPodSandbox(ctx, pod, handler)
	if err != nil {
		return err
	}
	s.resident = podID
	s.alive[podID] = &soakObject{pod: podID, state: int32(runtimeapi.PodSandboxState_SANDBOX_READY), next: none}
	ctrID, err := s.rs.CreateContainer(ctx, podID, s.e.ctrConfig("resident", "sleep", "100000"), pod)
	if err != nil {
		return err
	}
	s.alive[ctrID] = &soakObject{pod: podID, ctr: true, state: int32(runtimeapi.ContainerState_CONTAINER_CREATED), next: none}
	return s.call(ctrID, int32(runtimeapi.ContainerState_CONTAINER_RUNNING), func() error { return s.rs.StartContainer(ctx, ctrID) })
}

// call makes a call that takes the object id (and, for a pod, its containers) to state:
// until it is answered they may be in either state.
func (s *soakWorker) call(id string, state int32, fn func() error) error {
	objs := []*soakObject{s.alive[id]}
	next := []int32{state}
	if stop := int32(runtimeapi.PodSandboxState_SANDBOX_NOTREADY); !objs[0].ctr && next[0] == stop {
		for _, o := range s.alive {
			if o.ctr && o.pod == id {
				objs, next = append(objs, o), append(next, int32(runtimeapi.ContainerState_CONTAINER_EXITED))
			}
		}
	}
	for i, o := range objs {
		o.next = next[i]
	}
	if err := fn(); err != nil {
		for _, o := range objs {
			o.failed = err
		}
		return err
	}
	for _, o := range objs {
		o.state, o.next, o.failed = o.next, none, nil
	}
	return nil
}

// lostError is an object found missing or in a state the worker did not leave it in.
type lostError struct {
	error
	id string
}

// checkAfterRestart checks every pod and container the worker has, once after each
// restart of the daemon (a daemon that is down fails the calls that do it).
func (s *soakWorker) checkAfterRestart(ctx context.Context) error {
	now := s.transitions.Load()
	if now == s.checked || now%2 == 1 {
		return nil // checked since the last restart, or killed and not yet back
	}
	for id, o := range s.alive {
		if err := s.check(ctx, id, o); err != nil {
			return err
		}
	}
	s.checked = now
	s.checks++
	return nil
}

// check compares one object with what the worker expects of it: its state, and for a
// running container an exec's output.
func (s *soakWorker) check(ctx context.Context, id string, o *soakObject) error {
	lost := func(format string, args ...any) error {
		if o.failed != nil {
			format += " (the last call on it failed: %v)"
			args = append(args, o.failed)
		}
		return lostError{fmt.Errorf("%s (pod %s) after a restart: "+format+": lost", append([]any{id[:12], o.pod[:12]}, args...)...), id}
	}
	var got int32
	var what string
	if o.ctr {
		resp, err := s.rs.ContainerStatus(ctx, id, false)
		if status.Code(err) == codes.NotFound {
			return lost("not found")
		} else if err != nil {
			return err
		}
		got, what = int32(resp.GetStatus().GetState()), resp.GetStatus().GetState().String()
	} else {
		resp, err := s.rs.PodSandboxStatus(ctx, id, false)
		if status.Code(err) == codes.NotFound {
			return lost("not found")
		} else if err != nil {
			return err
		}
		got, what = int32(resp.GetStatus().GetState()), resp.GetStatus().GetState().String()
	}
	created, running, exited := int32(runtimeapi.ContainerState_CONTAINER_CREATED), int32(runtimeapi.ContainerState_CONTAINER_RUNNING), int32(runtimeapi.ContainerState_CONTAINER_EXITED)
	if o.ctr && o.shimV2 && o.failed != nil && o.state == created && o.next == running && got == exited {
		o.state, o.next = exited, none // a start the daemon died in ended it (see shimV2)
		return nil
	}
	if got != o.state && got != o.next {
		name := func(v int32) string {
			if o.ctr {
				return runtimeapi.ContainerState(v).String()
			}
			return runtimeapi.PodSandboxState(v).String()
		}
		want := name(o.state)
		if o.next != none {
			want += " or " + name(o.next)
		}
		return lost("%s, want %s", what, want)
	}
	if o.ctr && got == int32(runtimeapi.ContainerState_CONTAINER_RUNNING) {
		token := fmt.Sprintf("alive-%d-%d", s.w, s.transitions.Load())
		stdout, stderr, err := s.rs.ExecSync(ctx, id, []string{"echo", token}, 30*time.Second)
		if isUnavailable(err) {
			return err
		}
		if err != nil || strings.TrimSpace(string(stdout)) != token {
			return lost("RUNNING, but an exec echoed %q (%v, %q)", stdout, err, stderr)
		}
		s.execs++
	}
	return nil
}

// retryUnavailable calls fn until the daemon answers it.
func (s *soakWorker) retryUnavailable(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := fn()
		if err == nil || !isUnavailable(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// removePod stops and removes a pod, forgetting it and its containers first: a removal
// the daemon died in may have taken any of them.
func (s *soakWorker) removePod(ctx context.Context, podID string) error {
	if err := s.rs.StopPodSandbox(ctx, podID); err != nil {
		return err
	}
	s.forget(podID)
	return s.rs.RemovePodSandbox(ctx, podID)
}

// cycle runs one pod through its life, checking what the worker has after each restart
// it sees between calls. It reports false when a call failed and the pod was cleaned up
// by relisting instead; an error is a lost object or a failed cleanup.
func (s *soakWorker) cycle(ctx context.Context, handler string, i int) (bool, error) {
	name := fmt.Sprintf("soak-%d-%d", s.w, i)
	pod := podConfig(name, runtimeapi.NamespaceMode_CONTAINER)
	pod.LogDirectory = filepath.Join(s.e.logs, name)
	pod.Labels["soak-worker"] = strconv.Itoa(s.w)
	ctr := s.e.ctrConfig("sleep", "sleep", "100000")
	if i%2 == 1 {
		// Every other pod shares its PID namespace: a sandbox container on every handler.
		pod.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	seen := s.transitions.Load()
	var podID, ctrID string
	steps := []func() error{
		func() (err error) {
			if podID, err = s.rs.RunPodSandbox(cctx, pod, handler); err == nil {
				s.alive[podID] = &soakObject{pod: podID, state: int32(runtimeapi.PodSandboxState_SANDBOX_READY), next: none}
			}
			return err
		},
		func() (err error) {
			if ctrID, err = s.rs.CreateContainer(cctx, podID, ctr, pod); err == nil {
				s.alive[ctrID] = &soakObject{pod: podID, ctr: true, state: int32(runtimeapi.ContainerState_CONTAINER_CREATED), next: none,
					shimV2: s.e.d.Cfg.Handlers[handler].RuntimeType == "shim-v2"}
			}
			return err
		},
		func() error {
			return s.call(ctrID, int32(runtimeapi.ContainerState_CONTAINER_RUNNING), func() error { return s.rs.StartContainer(cctx, ctrID) })
		},
		func() error {
			return s.call(podID, int32(runtimeapi.PodSandboxState_SANDBOX_NOTREADY), func() error { return s.rs.StopPodSandbox(cctx, podID) })
		},
		func() error {
			s.forget(podID)
			return s.rs.RemovePodSandbox(cctx, podID)
		},
	}
	var err error
	for _, step := range steps {
		if err = s.checkAfterRestart(cctx); err != nil {
			break
		}
		if err = step(); err != nil {
			break
		}
	}
	if err == nil {
		return true, nil
	}
	var lost lostError
	if errors.As(err, &lost) {
		return false, fmt.Errorf("%s on %s: %w", name, handler, err)
	}
	if s.transitions.Load() == seen {
		return false, fmt.Errorf("a call failed while the daemon was up (%s on %s): %w", name, handler, err)
	}
	return false, s.retryUnavailable(ctx, func() error { return s.relistOnce(ctx) })
}

// relistOnce checks that everything the daemon said it made is still there as the
// worker left it, and removes this worker's cycling pods, as kubelet does with pods it no
// longer wants.
func (s *soakWorker) relistOnce(ctx context.Context) error {
	if s.transitions.Load()%2 == 1 {
		return status.Error(codes.Unavailable, "the daemon is being restarted") // check once it is back
	}
	s.checked = -1 // a call failed: check, whenever the last check was
	if err := s.checkAfterRestart(ctx); err != nil {
		return err
	}
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"soak-worker": strconv.Itoa(s.w)}}
	pods, err := s.rs.ListPodSandbox(ctx, filter)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if err := s.removePod(ctx, p.Id); err != nil {
			return err
		}
	}
	return nil
}

// forget drops a pod and its containers from alive before its removal is asked for: a
// removal the daemon died in may have taken any of them.
func (s *soakWorker) forget(podID string) {
	for id, o := range s.alive {
		if o.pod == podID {
			delete(s.alive, id)
		}
	}
}

// logLost logs the daemon's lines about a lost object: what each daemon did with it
// across the restarts (the whole log is long, and its tail is about the last removals).
func logLost(t *testing.T, d *Daemon, err error) {
	var lost lostError
	if !errors.As(err, &lost) {
		return
	}
	var lines []string
	for _, l := range strings.Split(d.Log(), "\n") {
		if strings.Contains(l, lost.id) || strings.Contains(l, "level=info msg=\"rtshimd") {
			lines = append(lines, l)
		}
	}
	t.Logf("the daemon's lines about %s:\n%s", lost.id, strings.Join(lines, "\n"))
}

// isUnavailable reports an error of a daemon that is down or restarting.
func isUnavailable(err error) bool {
	return status.Code(err) == codes.Unavailable
}
