//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
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
// restarted. A worker whose call fails (the daemon was down) lists its pods again, as
// kubelet relists, and finds every pod and container it was told exists; it removes them
// and goes on. Afterwards the node is compared with before. `make test` runs a short
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
	}
	t.Logf("soak: %d cycles on %v by %d workers, %d completed without a failed call, %d redone after one; daemon killed %d times",
		cycles, handlers, workers, done.Load(), retried.Load(), killed)
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
	// removed since, each with its pod's ID: each must be listed whenever the worker looks.
	alive map[string]string
	// transitions counts the daemon's kills and restarts.
	transitions *atomic.Int64
}

func newSoakWorker(ctx context.Context, e *containerEnv, w int, transitions *atomic.Int64) (*soakWorker, error) {
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + e.d.Socket).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		return nil, err
	}
	return &soakWorker{e: e, w: w, rs: rs, alive: map[string]string{}, transitions: transitions}, nil
}

// cycle runs one pod through its life. It reports false when a call failed and the pod
// was cleaned up by relisting instead; an error is a lost object or a failed cleanup.
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
	podID, err := s.rs.RunPodSandbox(cctx, pod, handler)
	if err == nil {
		s.alive[podID] = podID
		var ctrID string
		ctrID, err = s.rs.CreateContainer(cctx, podID, ctr, pod)
		if err == nil {
			s.alive[ctrID] = podID
			err = s.rs.StartContainer(cctx, ctrID)
		}
		if err == nil {
			err = s.rs.StopPodSandbox(cctx, podID)
		}
		if err == nil {
			s.forget(podID)
			err = s.rs.RemovePodSandbox(cctx, podID)
		}
		if err == nil {
			return true, nil
		}
	}
	if s.transitions.Load() == seen {
		return false, fmt.Errorf("a call failed while the daemon was up (%s on %s): %w", name, handler, err)
	}
	return false, s.relist(ctx)
}

// relist waits for the daemon to answer, checks that everything it said it made is still
// listed, and removes this worker's pods, as kubelet does with pods it no longer wants.
func (s *soakWorker) relist(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := s.relistOnce(ctx)
		if err == nil || !isUnavailable(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *soakWorker) relistOnce(ctx context.Context) error {
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"soak-worker": strconv.Itoa(s.w)}}
	pods, err := s.rs.ListPodSandbox(ctx, filter)
	if err != nil {
		return err
	}
	ctrs, err := s.rs.ListContainers(ctx, nil)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, p := range pods {
		listed[p.Id] = true
	}
	for _, c := range ctrs {
		listed[c.Id] = true
	}
	for id := range s.alive {
		if !listed[id] {
			return fmt.Errorf("%s was made (the daemon said so) and is not listed after a restart: lost", id[:12])
		}
	}
	for _, p := range pods {
		if err := s.rs.StopPodSandbox(ctx, p.Id); err != nil {
			return err
		}
		s.forget(p.Id)
		if err := s.rs.RemovePodSandbox(ctx, p.Id); err != nil {
			return err
		}
	}
	return nil
}

// forget drops a pod and its containers from alive before its removal is asked for: a
// removal the daemon died in may have taken any of them.
func (s *soakWorker) forget(podID string) {
	for id, pod := range s.alive {
		if pod == podID {
			delete(s.alive, id)
		}
	}
}

// isUnavailable reports an error of a daemon that is down or restarting.
func isUnavailable(err error) bool {
	return status.Code(err) == codes.Unavailable
}
