package bulkhead

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestConfigYAML(t *testing.T) {
	const doc = `
total: 64
pools:
  gold:
    share: 4
    lendable_percent: 25
    borrowing_percent: 50
    queue_length: 64
    max_wait: 2s
`
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	want := PoolConfig{Share: 4, LendablePercent: 25, BorrowingPercent: 50, QueueLength: 64, MaxWait: 2 * time.Second}
	if c.Total != 64 || c.Pools["gold"] != want {
		t.Fatalf("decoded %+v; want total 64 and gold %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestConfigValidateNamesField(t *testing.T) {
	good := PoolConfig{Share: 1, QueueLength: 1, MaxWait: time.Second}
	for _, tc := range []struct {
		name string
		mod  func(*PoolConfig)
		want string
	}{
		{"share", func(p *PoolConfig) { p.Share = 0 }, "pools.gold.share: must be between 1 and 1000000"},
		{"lendable", func(p *PoolConfig) { p.LendablePercent = 101 }, "pools.gold.lendable_percent: must be between 0 and 100"},
		{"borrowing", func(p *PoolConfig) { p.BorrowingPercent = -1 }, "pools.gold.borrowing_percent: must be between 0 and 10000"},
		{"queue", func(p *PoolConfig) { p.QueueLength = -1 }, "pools.gold.queue_length: must be between 0 and 1000000"},
		{"max wait", func(p *PoolConfig) { p.MaxWait = 0 }, "pools.gold.max_wait: must be > 0 when queue_length > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.mod(&p)
			err := Config{Total: 8, Pools: map[string]PoolConfig{"gold": p, "silver": good}}.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v; want an ErrInvalidConfig containing %q", err, tc.want)
			}
			if _, err := NewPools(Config{Total: 8, Pools: map[string]PoolConfig{"gold": p}}); err == nil {
				t.Fatal("NewPools accepted an invalid config")
			}
		})
	}
	err := Config{}.Validate()
	for _, want := range []string{"total: must be between 1 and 1000000", "pools: must define at least one pool"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate of the zero Config = %v; want it to contain %q", err, want)
		}
	}
	if err := (Config{Total: 1, Pools: map[string]PoolConfig{"bare": {Share: 1}}}).Validate(); err != nil {
		t.Errorf("a pool without a queue needs no max_wait; got %v", err)
	}
}
