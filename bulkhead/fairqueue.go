package bulkhead

// FairQueue is a deficit-round-robin queue of items across flows (tenants),
// weighted by each item's cost: over time every flow with items waiting is
// served the same total cost, whatever the others have queued. Within a flow
// items leave in push order.
//
// Push, Pop and Remove are O(1) whatever the number of flows or items. A flow
// exists only while it has items: the entry of an emptied flow is deleted,
// and once the queue drains its storage is released, so memory follows what
// is queued now rather than how many flows ever were.
//
// The zero value is not usable; create one with [NewFairQueue]. A FairQueue
// is not safe for concurrent use: guard it with a mutex (as [Pools] does).
type FairQueue[T any] struct {
	// nodes and flows are slabs addressed by index; index 0 is the nil
	// index, so the zero Handle matches nothing. Free slots are chained
	// through next.
	nodes    []qnode[T]
	freeNode int32
	flows    []qflow
	freeFlow int32
	byKey    map[string]int32
	cur      int32 // the flow at the front of the round, 0 when empty
	quantum  int   // credit a flow gets per visit: the largest cost pushed
	n        int   // items queued
	seq      uint64
	byCount  []int32 // byCount[c]: a list of the flows holding c items
	maxCount int
}

// Handle names one pushed item so that it can be removed before it is
// popped. The zero Handle names nothing.
type Handle struct {
	node int32
	seq  uint64
}

type qnode[T any] struct {
	item       T
	cost       int
	seq        uint64 // 0 while free
	flow       int32
	prev, next int32 // within the flow, or the free list
}

type qflow struct {
	key          string
	deficit      int // credit left in this visit or carried from the last
	n            int // items queued
	head, tail   int32
	prev, next   int32 // the round (a ring), or the free list
	cprev, cnext int32 // the byCount list for n
	visiting     bool  // deficit has been topped up for this visit
}

// shrinkAbove is the slab length above which an emptied queue gives its
// storage back rather than keeping it for the next burst.
const shrinkAbove = 4096

// NewFairQueue returns an empty queue.
func NewFairQueue[T any]() *FairQueue[T] {
	q := &FairQueue[T]{}
	q.reset()
	return q
}

func (q *FairQueue[T]) reset() {
	q.nodes = make([]qnode[T], 1, 64)
	q.flows = make([]qflow, 1, 16)
	q.byCount = make([]int32, 2, 16)
	q.byKey = make(map[string]int32)
	q.freeNode, q.freeFlow, q.cur, q.maxCount, q.quantum = 0, 0, 0, 0, 0
}

// Len reports the number of items queued.
func (q *FairQueue[T]) Len() int { return q.n }

// Flows reports the number of flows with items queued.
func (q *FairQueue[T]) Flows() int { return len(q.byKey) }

// Push appends item to flow's queue. cost is the item's weight in the
// round-robin (a flow of cost-4 items gets a quarter as many items served as
// a flow of cost-1 items); a cost below 1 counts as 1. The returned Handle
// can remove the item before it is popped.
func (q *FairQueue[T]) Push(flow string, cost int, item T) Handle {
	cost = max(cost, 1)
	// The quantum is at least the largest cost, so every visit serves at
	// least one item and Pop never loops over more than two flows.
	q.quantum = max(q.quantum, cost)
	fi, ok := q.byKey[flow]
	if !ok {
		fi = q.newFlow(flow)
	}
	ni := q.newNode()
	q.seq++
	nd := &q.nodes[ni]
	nd.item, nd.cost, nd.seq, nd.flow = item, cost, q.seq, fi
	f := &q.flows[fi]
	nd.prev, nd.next = f.tail, 0
	if f.tail != 0 {
		q.nodes[f.tail].next = ni
	} else {
		f.head = ni
	}
	f.tail = ni
	q.recount(fi, +1)
	q.n++
	return Handle{node: ni, seq: nd.seq}
}

// Pop removes and returns the next item in deficit-round-robin order, or
// reports false when the queue is empty.
func (q *FairQueue[T]) Pop() (T, bool) { return q.PopFunc(nil) }

// PopFunc is Pop that serves only flows whose first item ready accepts (nil
// accepts all): a flow whose first item is not ready keeps its place and
// its credit, without a new quantum, until a later round finds it ready. It
// reports false when no flow's first item is ready. With every flow ready
// it is O(1); otherwise it looks at each flow once at most.
func (q *FairQueue[T]) PopFunc(ready func(T) bool) (T, bool) {
	skipped, flows := 0, len(q.byKey)
	for q.cur != 0 && skipped < flows {
		fi := q.cur
		f := &q.flows[fi]
		head := &q.nodes[f.head]
		if ready != nil && !ready(head.item) {
			skipped++
			q.cur = f.next
			continue
		}
		if !f.visiting {
			f.visiting = true
			f.deficit += q.quantum
		}
		if f.deficit >= head.cost {
			f.deficit -= head.cost
			item := head.item
			q.unlink(f.head)
			return item, true
		}
		// Out of credit: the rest waits for the next round.
		f.visiting = false
		q.cur = f.next
	}
	var zero T
	return zero, false
}

// Remove takes the item h names out of the queue and reports whether it was
// still queued. Removing an item twice, or one already popped, does nothing.
func (q *FairQueue[T]) Remove(h Handle) bool {
	if h.node <= 0 || int(h.node) >= len(q.nodes) || q.nodes[h.node].seq != h.seq || h.seq == 0 {
		return false
	}
	q.unlink(h.node)
	return true
}

// flowLen reports how many items flow has queued.
func (q *FairQueue[T]) flowLen(flow string) int {
	if fi, ok := q.byKey[flow]; ok {
		return q.flows[fi].n
	}
	return 0
}

// longest reports a flow holding the most items, and how many.
func (q *FairQueue[T]) longest() (flow string, n int) {
	if q.maxCount == 0 {
		return "", 0
	}
	return q.flows[q.byCount[q.maxCount]].key, q.maxCount
}

// newest returns the last item pushed to flow, leaving it queued.
func (q *FairQueue[T]) newest(flow string) (T, bool) {
	fi, ok := q.byKey[flow]
	if !ok {
		var zero T
		return zero, false
	}
	return q.nodes[q.flows[fi].tail].item, true
}

// popOldest removes and returns the first item of flow, outside the round
// robin (its credit unchanged).
func (q *FairQueue[T]) popOldest(flow string) (T, bool) { return q.popEnd(flow, false) }

// popNewest removes and returns the last item pushed to flow.
func (q *FairQueue[T]) popNewest(flow string) (T, bool) { return q.popEnd(flow, true) }

func (q *FairQueue[T]) popEnd(flow string, newest bool) (T, bool) {
	fi, ok := q.byKey[flow]
	if !ok {
		var zero T
		return zero, false
	}
	ni := q.flows[fi].head
	if newest {
		ni = q.flows[fi].tail
	}
	item := q.nodes[ni].item
	q.unlink(ni)
	return item, true
}

// unlink removes node ni from its flow, deleting the flow once empty.
func (q *FairQueue[T]) unlink(ni int32) {
	nd := &q.nodes[ni]
	fi := nd.flow
	f := &q.flows[fi]
	if nd.prev != 0 {
		q.nodes[nd.prev].next = nd.next
	} else {
		f.head = nd.next
	}
	if nd.next != 0 {
		q.nodes[nd.next].prev = nd.prev
	} else {
		f.tail = nd.prev
	}
	q.freeNodeAt(ni)
	q.n--
	q.recount(fi, -1)
	if q.flows[fi].n == 0 {
		q.deleteFlow(fi)
	}
	if q.n == 0 {
		// An empty queue forgets its largest cost: one export long ago
		// must not give every flow twenty cheap items per turn forever.
		q.quantum = 0
	}
	if q.n == 0 && (len(q.nodes) > shrinkAbove || len(q.flows) > shrinkAbove) {
		q.reset()
	}
}

func (q *FairQueue[T]) newNode() int32 {
	if ni := q.freeNode; ni != 0 {
		q.freeNode = q.nodes[ni].next
		return ni
	}
	q.nodes = append(q.nodes, qnode[T]{})
	return int32(len(q.nodes) - 1)
}

func (q *FairQueue[T]) freeNodeAt(ni int32) {
	q.nodes[ni] = qnode[T]{next: q.freeNode} // drop the item for the GC
	q.freeNode = ni
}

// newFlow adds an empty flow at the back of the round.
func (q *FairQueue[T]) newFlow(key string) int32 {
	fi := q.freeFlow
	if fi != 0 {
		q.freeFlow = q.flows[fi].next
	} else {
		q.flows = append(q.flows, qflow{})
		fi = int32(len(q.flows) - 1)
	}
	q.flows[fi] = qflow{key: key}
	q.byKey[key] = fi
	if q.cur == 0 {
		q.flows[fi].prev, q.flows[fi].next = fi, fi
		q.cur = fi
		return fi
	}
	back := q.flows[q.cur].prev
	q.flows[fi].prev, q.flows[fi].next = back, q.cur
	q.flows[back].next = fi
	q.flows[q.cur].prev = fi
	return fi
}

// deleteFlow removes an empty flow from the round; its deficit is forgotten,
// as DRR does, so an idle flow cannot bank credit.
func (q *FairQueue[T]) deleteFlow(fi int32) {
	f := &q.flows[fi]
	if f.next == fi {
		q.cur = 0
	} else {
		q.flows[f.prev].next = f.next
		q.flows[f.next].prev = f.prev
		if q.cur == fi {
			q.cur = f.next
		}
	}
	delete(q.byKey, f.key)
	q.flows[fi] = qflow{next: q.freeFlow}
	q.freeFlow = fi
}

// recount moves flow fi from the byCount list of its item count to that of
// count+delta, keeping maxCount exact: counts move by one, so the maximum
// falls by at most one per call.
func (q *FairQueue[T]) recount(fi int32, delta int) {
	f := &q.flows[fi]
	if f.n > 0 {
		if f.cprev != 0 {
			q.flows[f.cprev].cnext = f.cnext
		} else {
			q.byCount[f.n] = f.cnext
		}
		if f.cnext != 0 {
			q.flows[f.cnext].cprev = f.cprev
		}
	}
	f.n += delta
	f.cprev, f.cnext = 0, 0
	if f.n > 0 {
		for len(q.byCount) <= f.n {
			q.byCount = append(q.byCount, 0)
		}
		f.cnext = q.byCount[f.n]
		if f.cnext != 0 {
			q.flows[f.cnext].cprev = fi
		}
		q.byCount[f.n] = fi
	}
	q.maxCount = max(q.maxCount, f.n)
	if q.maxCount > 0 && q.byCount[q.maxCount] == 0 {
		q.maxCount--
	}
}
