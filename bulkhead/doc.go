// Package bulkhead shares the upstream's concurrency fairly: per-tenant
// concurrency caps ([Caps]), per-tier pools of seats with bounded queues
// ([Pools]), and the fair queue that orders those queues across tenants
// ([FairQueue]), which also stands on its own for per-tenant job queues.
//
// It imports no other fairgate package; admission composes it into the
// pipeline, where the adaptive limit drives [Pools.SetTotal] and
// [OnShort] tells the limit when a request found no seat it may reach.
//
// # The rule stack
//
// Above the plain bulkhead (seats, bounded queues, lending and borrowing),
// Pools applies a stack of rules that keep a light tenant's short requests
// from waiting behind a heavier tenant's long ones: the fair queue, the
// headroom kept for lighter tenants, the floor below which no headroom is
// kept, the headroom over all pools, the guarantee when the pools shrink,
// and the borrowing rules of light tenants. Each rule is specified once,
// on its constant in rules.go; the negative control of its test builds
// Pools without it.
//
// # Caps
//
// [Caps.TryAcquire] admits a tenant's request while it has fewer than max in
// flight; the [Slot] it returns is released once. Counts live in 64 shards,
// each a mutex and a map, and a tenant's entry is deleted when its last
// request ends. Caps are per process: with several instances the admission
// layer divides a tenant's cap among them.
//
// With pools, a tenant's cap is kept by the pools themselves
// ([Request].Cap): it counts the tenant's requests holding seats in any
// pool, never those waiting in a queue (as APF counts seats), and the queue
// skips a flow whose tenant is at its cap without taking its place or its
// credit ([FairQueue.PopFunc]), serving other flows meanwhile.
//
// # Fair shares
//
// Each pool keeps every tenant's use of it: its requests holding or queued
// for the pool's seats, averaged over about [UsageWindow]. The pool's seats
// are divided among the tenants using it by weighted max-min fair share
// (internal/fairshare): [Pools.Share] tells a tenant within its share from
// one above it, so that the shedder in front of the pool sheds only the
// latter. When a seat frees, a queued request of a tenant within its share
// goes first, and a full queue makes room for one by pushing out the newest
// request of a longest flow whose tenant is above its share: the waiting
// falls on the tenants whose traffic builds the queue.
//
// # Pools
//
// Like Kubernetes API Priority and Fairness, each pool's nominal seats are
// its share of a total that can change at run time, total × share ÷ sum of
// shares, rounded so that the seats add up to exactly the total (largest
// remainder; every pool keeps at least one seat, so the total is at least
// the number of pools)
// ([Pools.SetTotal]); seats above a lowered total drain, they are not taken
// back. A pool with no free seat may borrow one from a pool that leaves it
// idle, within the lender's lendable_percent and the borrower's
// borrowing_percent. A pool with requests queued lends nothing, so a lender
// whose own traffic returns gets its seats back as the borrowers release
// them. Borrowing is decided per request when a seat is free, not by the
// periodic reallocation APF runs: pools are few and the accounting is a
// handful of counters under one mutex.
//
// A request that finds no seat waits in its pool's queue up to max_wait and
// never past its context's deadline. Errors are [ErrQueueFull],
// [ErrWaitTimeout], or ctx.Err() as is. A [Seat] is released exactly once
// (copies and repeated calls do nothing), which hands it to the next queued
// request.
//
// # Fair queuing: why deficit round robin
//
// The queue inside a pool, and [FairQueue] on its own, is deficit round
// robin (Shreedhar and Varghese, 1995) weighted by cost. Each flow (tenant)
// with items queued is visited in turn and, per visit, receives a quantum of
// credit and spends it on items in push order; unspent credit carries over
// only while the flow stays non-empty. Over any busy period each flow is
// served the same cost within one quantum, whatever the others have queued:
// one tenant's 500 queued exports add at most one quantum of its requests
// (the largest cost queued, so one export, or that cost's worth of cheap
// requests) ahead of another tenant's single request. The quantum is the
// largest cost pushed since the queue was last empty.
//
// The alternative, APF's virtual-time fair queuing with shuffle sharding,
// needs an estimate of each request's duration to compute virtual finish
// times, and shuffle sharding trades exact isolation for a fixed number of
// queues, letting two tenants share a queue. Our flows are authenticated
// tenants, so a queue per tenant is bounded by configuration, and DRR is
// exact per tenant, needs no duration estimate and costs O(1) per push and
// pop: the quantum is the largest cost pushed so far, so every visit serves
// at least one item and Pop looks at no more than two flows.
//
// A pool's queue is bounded in total (queue_length). So that one flow
// cannot fill it against the others, a request arriving at a full queue
// pushes out the newest request of the longest flow when its own flow is
// shorter ("longest queue drop"); the flow lengths are kept in count
// buckets, so finding the longest is O(1) too.
//
// # Time
//
// The package reads the time and sets timers through package time only. Its
// tests run in testing/synctest bubbles, where that time is fake and moves
// only when every goroutine is blocked, so they are deterministic and take no
// wall-clock time.
package bulkhead
