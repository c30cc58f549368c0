package rls_test

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
)

// An answer of either service as the differential test compares it, and
// the text that shows a call and its answers in the report.

// fields is one answer, field by field: "error", "overall",
// "status[i].code", "status[i].current_limit",
// "status[i].limit_remaining", in the fixed pass
// "status[i].duration_until_reset" (withResets), and "header <Key>".
// Absent fields are missing from the map.
type fields map[string]string

func answerFields(resp *rlsv3.RateLimitResponse, err error) fields {
	f := fields{}
	if err != nil {
		f["error"] = status.Code(err).String()
		return f
	}
	f["overall"] = resp.OverallCode.String()
	for i, st := range resp.Statuses {
		p := "status[" + strconv.Itoa(i) + "]."
		f[p+"code"] = st.Code.String()
		f[p+"current_limit"] = limitString(st.CurrentLimit)
		f[p+"limit_remaining"] = strconv.FormatUint(uint64(st.LimitRemaining), 10)
	}
	for _, h := range resp.ResponseHeadersToAdd {
		f["header "+h.Key] = h.Value
	}
	return f
}

func limitString(l *rlsv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%s %q", l.RequestsPerUnit, l.Unit, l.Name)
}

func (l *limit) String() string {
	return fmt.Sprintf("%d/%s %q", l.rpu, l.unit, l.name)
}

// keys returns the fields of a and b, in a stable order: error, the
// statuses, overall, the headers.
func keys(a, b fields) []string {
	var ks []string
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	rank := func(k string) int {
		switch {
		case k == "error":
			return 0
		case strings.HasPrefix(k, "status["):
			return 1
		case k == "overall": // after the statuses, which it follows
			return 2
		}
		return 3
	}
	sort.Slice(ks, func(i, j int) bool {
		if ri, rj := rank(ks[i]), rank(ks[j]); ri != rj {
			return ri < rj
		}
		return statusLess(ks[i], ks[j])
	})
	return ks
}

// statusLess orders status[2] before status[10].
func statusLess(a, b string) bool {
	ia, ra := statusIndex(a)
	ib, rb := statusIndex(b)
	if ia != ib {
		return ia < ib
	}
	return ra < rb
}

func statusIndex(k string) (int, string) {
	s, ok := strings.CutPrefix(k, "status[")
	if !ok {
		return -1, k
	}
	n, rest, _ := strings.Cut(s, "]")
	i, _ := strconv.Atoi(n)
	return i, rest
}

func orAbsent(f fields, k string) string {
	if v, ok := f[k]; ok {
		return v
	}
	return "(absent)"
}

// render is an answer on one line.
func render(f fields) string {
	if e, ok := f["error"]; ok {
		return "error " + e
	}
	var b strings.Builder
	b.WriteString(f["overall"])
	b.WriteString(" [")
	for i := 0; ; i++ {
		p := "status[" + strconv.Itoa(i) + "]."
		code, ok := f[p+"code"]
		if !ok {
			break
		}
		if i > 0 {
			b.WriteString(" | ")
		}
		fmt.Fprintf(&b, "%s %s rem=%s", code, f[p+"current_limit"], f[p+"limit_remaining"])
		if r, ok := f[p+"duration_until_reset"]; ok {
			b.WriteString(" reset=" + r)
		}
	}
	b.WriteString("]")
	var hs []string
	for k, v := range f {
		if h, ok := strings.CutPrefix(k, "header "); ok {
			hs = append(hs, h+": "+v)
		}
	}
	if len(hs) > 0 {
		slices.Sort(hs)
		b.WriteString(" {" + strings.Join(hs, "; ") + "}")
	}
	return b.String()
}

// requestString is a request on one line.
func requestString(req *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain=%q hits_addend=%d", req.Domain, req.HitsAddend)
	for _, d := range req.Descriptors {
		var es []string
		for _, e := range d.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		b.WriteString(" (" + strings.Join(es, ","))
		if h := d.GetHitsAddend(); h != nil {
			fmt.Fprintf(&b, " hits_addend=%d", h.Value)
		}
		if o := d.GetLimit(); o != nil {
			fmt.Fprintf(&b, " limit=%d/%s", o.RequestsPerUnit, o.Unit)
			if mu := o.GetUnitMultiplier(); mu != nil {
				fmt.Fprintf(&b, "x%d", mu.Value)
			}
		}
		if d.IsNegativeHits {
			b.WriteString(" is_negative_hits")
		}
		b.WriteString(")")
	}
	return b.String()
}
