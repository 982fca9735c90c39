package backup

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed cron schedule for backups, evaluated on demand from a
// reconciler instead of by a timer or goroutine per custom resource.
type Schedule struct {
	spec  string
	sched cron.Schedule
}

// ParseSchedule parses a standard five-field cron expression ("0 3 * * *"),
// a descriptor ("@daily", "@hourly", "@every 6h") and an optional time zone
// prefix ("CRON_TZ=Europe/Berlin 0 3 * * *"). Without a time zone the
// schedule is evaluated in the location of the times passed to
// [Schedule.Next]; pass UTC times to get UTC schedules.
func ParseSchedule(spec string) (Schedule, error) {
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("backup schedule %q: %w; use five fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\", or a descriptor such as \"@daily\"", spec, err)
	}
	return Schedule{spec: spec, sched: s}, nil
}

// String returns the expression the schedule was parsed from.
func (s Schedule) String() string { return s.spec }

// Next reports whether a backup is due at now, given the time of the last
// scheduled run (successful or not; zero if there was none), and how long to
// wait before asking again: return it as the reconciler's RequeueAfter.
//
// With a zero lastRun the backup is due immediately; pass the custom
// resource's creation time instead to wait for the first scheduled time.
// Missed runs are not caught up one by one: if several scheduled times passed
// since lastRun, one backup is due. When due, requeueAfter is the time from
// now to the next scheduled time after now; record now as the last run once
// the backup was started. A zero Schedule is never due and returns 0.
func (s Schedule) Next(lastRun, now time.Time) (due bool, requeueAfter time.Duration) {
	if s.sched == nil {
		return false, 0
	}
	after := s.sched.Next(now)
	wait := after.Sub(now)
	if lastRun.IsZero() {
		return true, wait
	}
	next := s.sched.Next(lastRun)
	if !now.Before(next) {
		return true, wait
	}
	return false, next.Sub(now)
}
