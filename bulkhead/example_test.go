package bulkhead_test

import (
	"fmt"

	"github.com/fairgate/fairgate/bulkhead"
)

// Per-tenant background job queues: one tenant's 50,000 bulk tasks do not
// starve another tenant's notifications, which are served in alternation
// with the bulk tasks as soon as they are queued.
func ExampleFairQueue() {
	type job struct {
		tenant, kind string
		n            int
	}
	q := bulkhead.NewFairQueue[job]()
	for i := range 50000 {
		q.Push("acme", 1, job{"acme", "bulk export", i})
	}
	for i := range 3 {
		q.Push("globex", 1, job{"globex", "notification", i})
	}
	for pos := 1; q.Len() > 0; pos++ {
		j, _ := q.Pop()
		if j.tenant == "globex" {
			fmt.Printf("%s %d of %s run as job %d of %d\n", j.kind, j.n, j.tenant, pos, 50003)
		}
	}
	// Output:
	// notification 0 of globex run as job 2 of 50003
	// notification 1 of globex run as job 4 of 50003
	// notification 2 of globex run as job 6 of 50003
}
