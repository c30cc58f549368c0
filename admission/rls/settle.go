package rls

import (
	"context"
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// SettleKey is the key of the entry that makes a descriptor a
// settlement: what a request used, sent by Envoy once its stream is done
// (a rate_limits entry with apply_on_stream_done, its hits_addend read
// from the response, "%TRAILER(x-usage-tokens)%"), less what the same
// descriptor reserved on the request path, the entry's value:
//
//	{generic_key: {descriptor_key: fairgate_settle, descriptor_value: "200"}}
//
// It must be the descriptor's last entry; the descriptor is matched and
// its bucket named without it, so the settlement meets the bucket the
// reserve was taken from. The difference (hits − reserve) is charged or
// refunded as the HTTP path settles (ratelimit.Settler): never refused,
// a bucket going into debt by at most its burst, a refund never above
// it. The descriptor is answered OK with no state: Envoy ignores the
// answer.
const SettleKey = "fairgate_settle"

// maxReserve bounds a settlement's reserve, as Envoy bounds hits_addend.
const maxReserve = 1_000_000_000

// settlement returns the reserve of d when d is a settlement (its last
// entry is SettleKey with a valid reserve, see validSettlement).
func settlement(d *ratelimitDescriptor) (float64, bool) {
	es := d.GetEntries()
	if len(es) == 0 || es[len(es)-1].GetKey() != SettleKey {
		return 0, false
	}
	r, err := strconv.ParseUint(es[len(es)-1].GetValue(), 10, 32)
	if err != nil || r > maxReserve {
		return 0, false
	}
	return float64(r), true
}

// validSettlement reports whether d's SettleKey entries, if any, make a
// settlement: one, the last, its value a whole number of tokens from 0 to
// 1e9.
func validSettlement(d *ratelimitDescriptor) bool {
	es := d.GetEntries()
	for j, e := range es {
		if e.GetKey() == SettleKey && j != len(es)-1 {
			return false
		}
	}
	if len(es) == 0 || es[len(es)-1].GetKey() != SettleKey {
		return true
	}
	_, ok := settlement(d)
	return ok
}

// matchEntries returns descriptor i's entries as its match and bucket see
// them: a settlement's without its last, SettleKey's.
func matchEntries(req *rlsv3.RateLimitRequest, vs []verdict, i int) []*ratelimitEntry {
	es := req.Descriptors[i].GetEntries()
	if vs[i].settle {
		return es[:len(es)-1]
	}
	return es
}

// settleAll settles the verdicts at settles (limited, cost not zero) in
// one store call: one bucket's settlements summed, whatever the other
// descriptors of the call decided. A store that cannot settle leaves the
// reserves standing; one that fails is Unavailable, as a charge's.
func (s *Service) settleAll(ctx context.Context, req *rlsv3.RateLimitRequest, tag string, vs []verdict, settles []int) error {
	st, ok := s.store.(ratelimit.Settler)
	if !ok {
		return nil
	}
	takes, _ := gather(req, tag, vs, settles)
	if err := st.Settle(ctx, s.settleID(), takes); err != nil {
		return storeError(ctx, err)
	}
	return nil
}

// settleID names one settlement: this service's nonce and a count (Envoy
// sends a stream's once and never retries it, so nothing of the request
// names it).
func (s *Service) settleID() string {
	return s.settleNonce + strconv.FormatUint(s.settleSeq.Add(1), 36)
}
