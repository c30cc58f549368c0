package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/admission/redisstore"
)

// checkRedis makes sure the Redis at addr answers, so a wrong address fails
// the fairgate-redis mode at once rather than every request through its
// failure policy.
func checkRedis(ctx context.Context, cfg redisstore.Config) error {
	client, err := redisstore.NewClient(cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: redis at %v: %w", cfg.Addrs, err)
	}
	return nil
}
