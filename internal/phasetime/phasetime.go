// Package phasetime times the steps of one operation (a pod's or a container's creation)
// for a single debug log line, so that a slow start can be taken apart without a
// profiler: which step grew is the first question when starts slow down as pods pile up.
package phasetime

import (
	"time"

	"github.com/sirupsen/logrus"
)

// Timer collects the duration of each step since the previous mark. A Timer made while
// debug logging is off does nothing: the clock is not read on the hot path for a line
// nobody will see.
type Timer struct {
	on          bool
	begin, last time.Time
	fields      logrus.Fields
}

// Start begins timing.
func Start() *Timer {
	if !logrus.IsLevelEnabled(logrus.DebugLevel) {
		return &Timer{}
	}
	now := time.Now()
	return &Timer{on: true, begin: now, last: now, fields: logrus.Fields{}}
}

// Mark ends the step called name: it took the time since the previous mark. A name
// marked twice adds up.
func (t *Timer) Mark(name string) {
	if !t.on {
		return
	}
	now := time.Now()
	d, _ := t.fields[name].(time.Duration)
	t.fields[name] = d + now.Sub(t.last)
	t.last = now
}

// Log writes the steps, and the total since Start, at debug level with fields.
func (t *Timer) Log(fields logrus.Fields, msg string) {
	if !t.on {
		return
	}
	all := logrus.Fields{"total": time.Since(t.begin)}
	for k, v := range fields {
		all[k] = v
	}
	for k, v := range t.fields {
		all[k] = v
	}
	logrus.WithFields(all).Debug(msg)
}
