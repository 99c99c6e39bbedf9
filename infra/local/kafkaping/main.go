// Command kafkaping waits until a Kafka broker answers a metadata request that lists at
// least one broker, then prints the cluster id, controller and brokers. The local
// infrastructure scripts use it to decide that Kafka is up: an open TCP port is not enough,
// because a KRaft broker accepts connections before it has registered with its controller.
// With -nodes, the metadata must list each of those broker ids (a cluster node restarted
// alone is up once the others see it registered again).
//
//	go run ./infra/local/kafkaping -brokers 127.0.0.1:19092 -wait 90s
//	go run ./infra/local/kafkaping -brokers 127.0.0.1:19092,127.0.0.1:19094 -nodes 1,2,3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "comma-separated seed brokers")
	wait := flag.Duration("wait", 0, "keep trying this long before failing (0: one attempt)")
	nodes := flag.String("nodes", "", "comma-separated broker ids the metadata must list (default: any broker)")
	flag.Parse()

	var want []int32
	for _, s := range strings.Split(*nodes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kafkaping: -nodes: %q is not a broker id\n", s)
			os.Exit(2)
		}
		want = append(want, int32(id))
	}
	if err := run(strings.Split(*brokers, ","), want, *wait); err != nil {
		fmt.Fprintf(os.Stderr, "kafkaping: %v\n", err)
		os.Exit(1)
	}
}

func run(seeds []string, want []int32, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		desc, err := ping(seeds, want)
		if err == nil {
			fmt.Println(desc)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no metadata from %s: %w", strings.Join(seeds, ","), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ping uses a fresh client per attempt so a connection opened before the broker was ready
// does not linger into the next attempt.
func ping(seeds []string, want []int32) (string, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.DialTimeout(2*time.Second),
		kgo.RequestRetries(0),
		kgo.RetryTimeout(3*time.Second),
	)
	if err != nil {
		return "", fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return "", errors.New("metadata lists no brokers yet")
	}
	for _, id := range want {
		if !slices.ContainsFunc(md.Brokers, func(b kadm.BrokerDetail) bool { return b.NodeID == id }) {
			return "", fmt.Errorf("metadata does not list broker %d yet", id)
		}
	}
	var bs []string
	for _, b := range md.Brokers {
		bs = append(bs, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
	}
	return fmt.Sprintf("cluster %s controller %d brokers %s", md.Cluster, md.Controller, strings.Join(bs, ",")), nil
}
