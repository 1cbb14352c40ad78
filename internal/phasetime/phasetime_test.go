package phasetime

import (
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

func TestTimerLogsStepsAtDebug(t *testing.T) {
	log, hook := test.NewNullLogger()
	old, oldOut := logrus.GetLevel(), logrus.StandardLogger().Out
	logrus.SetLevel(logrus.DebugLevel)
	logrus.SetOutput(log.Out)
	logrus.AddHook(hook)
	t.Cleanup(func() {
		logrus.SetLevel(old)
		logrus.SetOutput(oldOut)
		logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	})

	tm := Start()
	time.Sleep(2 * time.Millisecond)
	tm.Mark("a")
	tm.Mark("b")
	tm.Mark("a")
	tm.Log(logrus.Fields{"id": "x"}, "timing")
	e := hook.LastEntry()
	if e == nil || e.Message != "timing" || e.Data["id"] != "x" {
		t.Fatalf("entry %+v", e)
	}
	if a := e.Data["a"].(time.Duration); a < 2*time.Millisecond {
		t.Errorf("a = %v, want >= 2ms", a)
	}
	if _, ok := e.Data["b"].(time.Duration); !ok {
		t.Errorf("no b in %v", e.Data)
	}
	if e.Data["total"].(time.Duration) < e.Data["a"].(time.Duration) {
		t.Errorf("total %v < a %v", e.Data["total"], e.Data["a"])
	}
}

func TestTimerOffBelowDebug(t *testing.T) {
	old := logrus.GetLevel()
	logrus.SetLevel(logrus.InfoLevel)
	t.Cleanup(func() { logrus.SetLevel(old) })
	tm := Start()
	tm.Mark("a")
	if tm.on || tm.fields != nil {
		t.Fatalf("timer on at info level: %+v", tm)
	}
}
