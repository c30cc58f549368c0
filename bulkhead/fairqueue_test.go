package bulkhead

import (
	"math/rand/v2"
	"testing"
)

func TestFairQueueFlowOrderAndAlternation(t *testing.T) {
	q := NewFairQueue[string]()
	for _, it := range []struct{ flow, item string }{
		{"a", "a1"}, {"a", "a2"}, {"a", "a3"}, {"b", "b1"}, {"b", "b2"}, {"c", "c1"},
	} {
		q.Push(it.flow, 1, it.item)
	}
	want := []string{"a1", "b1", "c1", "a2", "b2", "a3"}
	for i, w := range want {
		got, ok := q.Pop()
		if !ok || got != w {
			t.Fatalf("pop %d = %q, %v; want %q", i, got, ok, w)
		}
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop on an empty queue reported an item")
	}
	if q.Len() != 0 || q.Flows() != 0 {
		t.Fatalf("Len, Flows = %d, %d after draining; want 0, 0", q.Len(), q.Flows())
	}
}

// Both flows stay backlogged; the fair split is by cost, so the cost-1 flow
// gets four items for each of the cost-4 flow's.
func TestFairQueueWeightsByCost(t *testing.T) {
	q := NewFairQueue[string]()
	for range 1000 {
		q.Push("cheap", 1, "cheap")
		q.Push("dear", 4, "dear")
	}
	served := map[string]int{}
	for range 500 {
		it, _ := q.Pop()
		served[it]++
	}
	costCheap, costDear := served["cheap"]*1, served["dear"]*4
	if diff := costCheap - costDear; diff < -4 || diff > 4 {
		t.Errorf("cost served cheap %d, dear %d; want equal within one quantum (4)", costCheap, costDear)
	}
}

func TestFairQueueRemove(t *testing.T) {
	q := NewFairQueue[int]()
	h1 := q.Push("a", 1, 1)
	h2 := q.Push("a", 1, 2)
	h3 := q.Push("b", 1, 3)
	if !q.Remove(h2) {
		t.Fatal("Remove of a queued item reported false")
	}
	if q.Remove(h2) {
		t.Fatal("second Remove of the same item reported true")
	}
	if q.Remove(Handle{}) {
		t.Fatal("Remove of the zero Handle reported true")
	}
	if !q.Remove(h3) || q.Flows() != 1 {
		t.Fatalf("after removing b's only item, Flows = %d; want 1", q.Flows())
	}
	if got, _ := q.Pop(); got != 1 {
		t.Fatalf("Pop = %d; want 1", got)
	}
	if q.Remove(h1) {
		t.Fatal("Remove of a popped item reported true")
	}
	// A stale handle must not remove the item that reuses its slot.
	h4 := q.Push("c", 1, 4)
	if q.Remove(h1) || q.Len() != 1 {
		t.Fatalf("stale handle removed a newer item (h4 = %+v)", h4)
	}
}

// A drained queue gives its storage back; flows never outlive their items.
func TestFairQueueMemoryBounded(t *testing.T) {
	q := NewFairQueue[int]()
	for i := range 10 * shrinkAbove {
		q.Push(string(rune('a'+i%26))+string(rune(i)), 1, i)
	}
	if q.Flows() != 10*shrinkAbove {
		t.Fatalf("Flows = %d; want %d", q.Flows(), 10*shrinkAbove)
	}
	for q.Len() > 0 {
		q.Pop()
	}
	if len(q.nodes) > 1 || len(q.flows) > 1 || len(q.byKey) != 0 {
		t.Fatalf("after draining: %d nodes, %d flows, %d keys kept; want none", len(q.nodes)-1, len(q.flows)-1, len(q.byKey))
	}
}

// Random pushes, pops, removals and push-outs against a plain model: per-flow
// order is kept, lengths agree, and longest is a longest flow.
func TestFairQueueAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := NewFairQueue[int]()
	model := map[string][]int{}
	handles := map[int]Handle{}
	flowOf := map[int]string{}
	next := 0
	remove := func(flow string, item int) {
		s := model[flow]
		for i, v := range s {
			if v == item {
				model[flow] = append(s[:i:i], s[i+1:]...)
				break
			}
		}
		if len(model[flow]) == 0 {
			delete(model, flow)
		}
		delete(handles, item)
	}
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5:
			flow := string(rune('a' + rng.IntN(8)))
			handles[next] = q.Push(flow, 1+rng.IntN(3), next)
			flowOf[next] = flow
			model[flow] = append(model[flow], next)
			next++
		case op < 8:
			it, ok := q.Pop()
			if ok != (len(handles) > 0) {
				t.Fatalf("step %d: Pop ok = %v with %d queued", step, ok, len(handles))
			}
			if !ok {
				continue
			}
			if f := flowOf[it]; model[f][0] != it {
				t.Fatalf("step %d: popped %d of flow %s out of order; want %d", step, it, f, model[f][0])
			}
			remove(flowOf[it], it)
		case op < 9:
			for it, h := range handles {
				if !q.Remove(h) {
					t.Fatalf("step %d: Remove of queued %d failed", step, it)
				}
				remove(flowOf[it], it)
				break
			}
		default:
			flow, n := q.longest()
			if n > 0 {
				it, _ := q.popNewest(flow)
				if s := model[flow]; s[len(s)-1] != it {
					t.Fatalf("step %d: popNewest(%s) = %d; want %d", step, flow, it, s[len(s)-1])
				}
				remove(flow, it)
			}
		}
		longestN := 0
		for f, s := range model {
			longestN = max(longestN, len(s))
			if q.flowLen(f) != len(s) {
				t.Fatalf("step %d: flowLen(%s) = %d; want %d", step, f, q.flowLen(f), len(s))
			}
		}
		if _, n := q.longest(); n != longestN {
			t.Fatalf("step %d: longest = %d; want %d", step, n, longestN)
		}
		if q.Len() != len(handles) || q.Flows() != len(model) {
			t.Fatalf("step %d: Len, Flows = %d, %d; want %d, %d", step, q.Len(), q.Flows(), len(handles), len(model))
		}
	}
}

// TestFairQueueQuantumResets: once the queue has emptied, an expensive item
// served long ago no longer sets how many cheap items a flow gets per turn:
// a light flow's single item is served second, not after twenty of the
// heavy flow's.
func TestFairQueueQuantumResets(t *testing.T) {
	q := NewFairQueue[string]()
	q.Push("exporter", 20, "export")
	q.Pop()
	for range 100 {
		q.Push("heavy", 1, "heavy")
	}
	q.Push("light", 1, "light")
	for i := 1; ; i++ {
		item, ok := q.Pop()
		if !ok {
			t.Fatal("light never served")
		}
		if item == "light" {
			if i > 2 {
				t.Fatalf("light served %dth, want 2nd", i)
			}
			return
		}
	}
}
