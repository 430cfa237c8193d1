package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// Readiness checks built from a node's dependencies, for edge.Health.

// natsCheck passes while nc is connected.
func natsCheck(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("NATS %s", st)
		}
		return nil
	}
}

// redisCheck passes while rdb answers a PING.
func redisCheck(rdb redis.UniversalClient) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
}

// flagCheck passes once ok holds; what says what is missing until then.
func flagCheck(ok *atomic.Bool, what string) func(context.Context) error {
	return func(context.Context) error {
		if !ok.Load() {
			return errors.New(what)
		}
		return nil
	}
}
