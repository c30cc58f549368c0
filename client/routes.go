package client

import "time"

// maxRoutes bounds the routes one pace remembers. Beyond it the least
// recently used route is forgotten: its next request is paced like a new
// route's, by the quotas every response named, and its cost is learned
// again.
const maxRoutes = 256

// route is what a pace knows of one route (by default a method and a URL
// path; see Config.Route): the quotas its responses named, the cost of
// one of its requests and the hold a 429 put on it alone.
type route struct {
	key uint64
	// quotas has bit i set once a response to the route named the pace's
	// quotas[i]: from then on that quota paces the route's requests.
	quotas uint64
	// cost is the learned units one request takes from each quota it
	// counts against; 0 until learned (1 is assumed).
	cost float64
	// hold is the end of the Retry-After of a group or limit 429 whose
	// refusing quota could not be told: no send of the route before it.
	hold time.Time
	// prev and next link the routes from the most recently used to the
	// least; -1 at the ends.
	prev, next int32
}

// learn folds the sample c (units one request took) into r's cost,
// clamped to [1, limit] (limit < 1 is taken as 1).
func (r *route) learn(c, limit float64) {
	c = min(max(c, 1), max(limit, 1))
	if r.cost == 0 {
		r.cost = c
		return
	}
	r.cost += costEWMA * (c - r.cost)
}

// routeTable is the routes of a pace by key, at most maxRoutes of them,
// in least-recently-used order. The zero value is empty. It is not safe
// for concurrent use (pace.mu guards it), and a *route it returns is
// valid only until the next add.
type routeTable struct {
	index map[uint64]int32
	slots []route
	// head and tail are the most and the least recently used slot; -1
	// when the table is empty.
	head, tail int32
}

// get returns the route of key, marked as used, or nil.
func (rt *routeTable) get(key uint64) *route {
	i, ok := rt.index[key]
	if !ok {
		return nil
	}
	rt.unlink(i)
	rt.pushFront(i)
	return &rt.slots[i]
}

// add returns the route of key, marked as used, adding it when new; at
// maxRoutes, the new route takes the least recently used one's slot.
func (rt *routeTable) add(key uint64) *route {
	if r := rt.get(key); r != nil {
		return r
	}
	if rt.index == nil {
		rt.index = make(map[uint64]int32)
		rt.head, rt.tail = -1, -1
	}
	var i int32
	if len(rt.slots) < maxRoutes {
		rt.slots = append(rt.slots, route{})
		i = int32(len(rt.slots) - 1)
	} else {
		i = rt.tail
		rt.unlink(i)
		delete(rt.index, rt.slots[i].key)
	}
	rt.slots[i] = route{key: key}
	rt.index[key] = i
	rt.pushFront(i)
	return &rt.slots[i]
}

// each calls f with every route, in no particular order.
func (rt *routeTable) each(f func(*route)) {
	for i := range rt.slots {
		f(&rt.slots[i])
	}
}

func (rt *routeTable) unlink(i int32) {
	r := &rt.slots[i]
	if r.prev >= 0 {
		rt.slots[r.prev].next = r.next
	} else {
		rt.head = r.next
	}
	if r.next >= 0 {
		rt.slots[r.next].prev = r.prev
	} else {
		rt.tail = r.prev
	}
	r.prev, r.next = -1, -1
}

func (rt *routeTable) pushFront(i int32) {
	r := &rt.slots[i]
	r.prev, r.next = -1, rt.head
	if rt.head >= 0 {
		rt.slots[rt.head].prev = i
	}
	rt.head = i
	if rt.tail < 0 {
		rt.tail = i
	}
}
