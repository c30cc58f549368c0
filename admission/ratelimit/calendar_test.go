package ratelimit

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine has
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestCalendarBounds(t *testing.T) {
	berlin, kolkata := mustZone(t, "Europe/Berlin"), mustZone(t, "Asia/Kolkata")
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name       string
		c          Calendar
		at         string
		start, end string
	}{
		{"a minute since the epoch", Every(time.Minute), "2026-03-29T10:17:42Z", "2026-03-29T10:17:00Z", "2026-03-29T10:18:00Z"},
		{"a day since the epoch is a UTC day", Every(24 * time.Hour), "2026-03-29T23:59:59Z", "2026-03-29T00:00:00Z", "2026-03-30T00:00:00Z"},
		// 1970-01-01 was a Thursday: envoyproxy/ratelimit's weeks start then.
		{"a week since the epoch starts on Thursday", Every(7 * 24 * time.Hour), "2026-12-04T12:00:00Z", "2026-12-03T00:00:00Z", "2026-12-10T00:00:00Z"},
		{"a UTC day", In(Day, nil), "2026-12-04T00:00:00Z", "2026-12-04T00:00:00Z", "2026-12-05T00:00:00Z"},
		{"Berlin's day, in winter", In(Day, berlin), "2026-12-04T22:59:59Z", "2026-12-03T23:00:00Z", "2026-12-04T23:00:00Z"},
		{"Berlin's day, in winter, just after midnight", In(Day, berlin), "2026-12-04T23:00:00Z", "2026-12-04T23:00:00Z", "2026-12-05T23:00:00Z"},
		{"Berlin's 23-hour day (DST starts)", In(Day, berlin), "2026-03-29T12:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{"Berlin's 25-hour day (DST ends)", In(Day, berlin), "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
		{"Berlin's week starts on Monday", In(Week, berlin), "2026-12-06T20:00:00Z", "2026-11-29T23:00:00Z", "2026-12-06T23:00:00Z"},
		{"Berlin's week, on Monday", In(Week, berlin), "2026-12-06T23:30:00Z", "2026-12-06T23:00:00Z", "2026-12-13T23:00:00Z"},
		{"a February", In(Month, nil), "2028-02-29T23:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"Berlin's year", In(Year, berlin), "2026-12-31T23:30:00Z", "2026-12-31T23:00:00Z", "2027-12-31T23:00:00Z"},
		{"Kolkata's hour starts at :30 UTC", In(Hour, kolkata), "2026-12-04T10:15:00Z", "2026-12-04T09:30:00Z", "2026-12-04T10:30:00Z"},
		{"a UTC second", In(Second, nil), "2026-12-04T10:15:00.999Z", "2026-12-04T10:15:00Z", "2026-12-04T10:15:01Z"},
		// Amman's clocks went back from 01:00 to 00:00 on 2021-10-29:
		// the day starts at the first midnight, 21:00 UTC.
		{"Amman's day with two midnights", In(Day, mustZone(t, "Asia/Amman")), "2021-10-28T22:30:00Z", "2021-10-28T21:00:00Z", "2021-10-29T22:00:00Z"},
		{"before the epoch", Every(time.Minute), "1969-12-31T23:59:30Z", "1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		start, end := tt.c.Bounds(utc(tt.at))
		if !start.Equal(utc(tt.start)) || !end.Equal(utc(tt.end)) {
			t.Errorf("%s: Bounds(%s) = [%s, %s), want [%s, %s)", tt.name, tt.at,
				start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), tt.start, tt.end)
		}
	}
}

// TestCalendarBoundsHoldT walks a year of Berlin and Kolkata an hour and a
// minute at a time: every window holds its instant, and the next window
// starts where the last ended.
func TestCalendarBoundsHoldT(t *testing.T) {
	for _, loc := range []*time.Location{mustZone(t, "Europe/Berlin"), mustZone(t, "Asia/Kolkata"), mustZone(t, "America/Sao_Paulo"), mustZone(t, "Asia/Amman"), mustZone(t, "Asia/Gaza")} {
		for u := Second; u <= Year; u++ {
			c := In(u, loc)
			at := time.Date(2018, 1, 1, 0, 0, 0, 0, time.UTC)
			_, prevEnd := c.Bounds(at)
			for range 24 * 366 {
				at = at.Add(time.Hour + time.Minute)
				start, end := c.Bounds(at)
				if start.After(at) || !end.After(at) {
					t.Fatalf("%v in %v: Bounds(%v) = [%v, %v)", u, loc, at, start, end)
				}
				if start.Before(prevEnd) && !prevEnd.Equal(end) {
					t.Fatalf("%v in %v: window [%v, %v) overlaps the one ending %v", u, loc, start, end, prevEnd)
				}
				prevEnd = end
			}
		}
	}
}

func TestFixedWindowTakes(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 50, 0, time.UTC)
	clock := t0
	s := NewMemoryStore(MemoryStoreOptions{Now: func() time.Time { return clock }})
	c := Every(time.Minute)
	k := BucketKey{Tenant: "acme", Scope: "daily"}
	for i := range 3 {
		r, _ := s.Take(context.Background(), k, c.Limit(3, clock), 1)
		if !r.Allowed || r.Remaining != float64(2-i) || r.ResetAfter != 10*time.Second {
			t.Fatalf("take %d: %+v, want allowed, %d left, reset in 10s", i, r, 2-i)
		}
	}
	clock = t0.Add(9 * time.Second)
	r, _ := s.Take(context.Background(), k, c.Limit(3, clock), 1)
	if r.Allowed || r.RetryAfter != time.Second || r.ResetAfter != time.Second || r.Remaining != 0 {
		t.Fatalf("fourth take in the window: %+v, want refused until the window ends in 1s", r)
	}
	// The next window starts full, however little time has passed.
	clock = t0.Add(10 * time.Second)
	for i := range 3 {
		if r, _ := s.Take(context.Background(), k, c.Limit(3, clock), 1); !r.Allowed || r.ResetAfter != time.Minute {
			t.Fatalf("take %d of the next window: %+v", i, r)
		}
	}
	if got := s.Tokens(k, c.Limit(3, clock)); got != 0 {
		t.Fatalf("Tokens = %v, want 0", got)
	}
	// The window is forgotten once it is over.
	s.Sweep(s.Clock() + int64(2*time.Minute)) // its end, and the grace for a clock stepped back
	if s.Len() != 0 {
		t.Fatalf("%d entries after the window ended", s.Len())
	}
}

// TestFixedWindowAllOrNothing mixes a bucket and a window of one tenant:
// a refusal by either charges neither, and a key that changes kind starts
// afresh.
func TestFixedWindowAllOrNothing(t *testing.T) {
	clock := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s := NewMemoryStore(MemoryStoreOptions{Now: func() time.Time { return clock }})
	day := In(Day, nil)
	takes := func() []Take {
		return []Take{
			{Key: BucketKey{Tenant: "acme"}, Limit: Limit{Rate: 1, Burst: 5}, Cost: 1},
			{Key: BucketKey{Tenant: "acme", Scope: "daily"}, Limit: day.Limit(2, clock), Cost: 1},
		}
	}
	for i, want := range []bool{true, true, false, false} {
		res, err := s.TakeAll(context.Background(), takes())
		if err != nil || res[0].Allowed != want || res[1].Allowed != want {
			t.Fatalf("TakeAll %d: %+v, %v; want allowed %v", i, res, err, want)
		}
	}
	res, _ := s.TakeAll(context.Background(), takes())
	if res[0].Remaining != 3 || res[0].RetryAfter != 0 || res[1].RetryAfter != 14*time.Hour {
		t.Fatalf("refused by the day: %+v; want the bucket's 3 tokens untouched and a wait until midnight", res)
	}
	// The daily limit becomes a bucket: a fresh one, full.
	r, _ := s.Take(context.Background(), BucketKey{Tenant: "acme", Scope: "daily"}, Limit{Rate: 1, Burst: 2}, 2)
	if !r.Allowed {
		t.Fatalf("a window turned bucket: %+v, want a full bucket", r)
	}
}

// TestFixedWindowWallBehindStore: the gate's clock, stepped back two
// seconds since the store began, cuts windows that end after the store's
// reckoning of them; the window's entry is kept past its end, so a
// window of one admits one.
func TestFixedWindowWallBehindStore(t *testing.T) {
	storeNow := time.Date(2026, 1, 1, 0, 0, 59, 0, time.UTC)
	s := NewMemoryStore(MemoryStoreOptions{Now: func() time.Time { return storeNow }, SweepInterval: time.Millisecond})
	c, k, admitted := Every(time.Minute), BucketKey{Tenant: "t", Scope: "m"}, 0
	for range 19 {
		storeNow = storeNow.Add(100 * time.Millisecond)
		if r, _ := s.Take(context.Background(), k, c.Limit(1, storeNow.Add(-2*time.Second)), 1); r.Allowed {
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("a window of 1 admitted %d within one of the gate's minutes", admitted)
	}
}
