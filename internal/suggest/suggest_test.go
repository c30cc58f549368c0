package suggest

import "testing"

func TestNearest(t *testing.T) {
	fields := []string{"burst", "critical_reserve_percent", "groups", "limits", "max_concurrent", "mode", "pool", "rank", "rate", "shadow", "weight"}
	tiers := []string{"enterprise", "pro", "starter"}
	tests := []struct {
		word  string
		names []string
		want  string
	}{
		{"max_concurent", fields, "max_concurrent"}, // a letter left out
		{"burts", fields, "burst"},                  // two swapped
		{"Rate", fields, "rate"},                    // case
		{"prp", tiers, "pro"},                       // a letter replaced
		{"startr", tiers, "starter"},
		{"enterprize", tiers, "enterprise"},
		// Negative controls: nothing near enough is suggested, and
		// never the word itself.
		{"x", tiers, ""},
		{"premium", tiers, ""},
		{"max", fields, ""},
		{"pro", tiers, ""},
		{"anything", nil, ""},
	}
	for _, tt := range tests {
		if got := Nearest(tt.word, tt.names); got != tt.want {
			t.Errorf("Nearest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	if got, want := DidYouMean("max_concurent", []string{"max_concurrent"}), "; did you mean `max_concurrent`?"; got != want {
		t.Errorf("DidYouMean = %q, want %q", got, want)
	}
	if got := DidYouMean("zzz", []string{"max_concurrent"}); got != "" {
		t.Errorf("DidYouMean with nothing near = %q, want empty", got)
	}
}

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"ab", "ba", 1}, {"ca", "abc", 3}, {"naïve", "naive", 1},
	} {
		if got := distance([]rune(tt.a), []rune(tt.b)); got != tt.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
