package roster

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Status is what `notify roster status` shows: how far the roster is
// behind the platform's topics, and what it holds.
type Status struct {
	Users             int64 `json:"users"`
	Courses           int64 `json:"courses"`
	CoursesDeleted    int64 `json:"courses_deleted"`
	EnrollmentsActive int64 `json:"enrollments_active"`
	EnrollmentsEnded  int64 `json:"enrollments_ended"`
	Erasures          int64 `json:"erasures"`
	DLQ               int64 `json:"dlq"`
	// Lag is, per topic, the records not yet applied: the partitions' end
	// offsets minus the group's committed ones.
	Lag    map[string]int64 `json:"lag"`
	Topics []TopicStatus    `json:"topics"`
}

// TopicStatus is one topic's consumer lag and last applied change.
type TopicStatus struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Lag        int64  `json:"lag"`
	// SourcePos and SourceTime are those of the newest change applied
	// from the topic (its highest position over partitions); AppliedAt is
	// when the last batch committed. nil when nothing was applied yet.
	SourcePos  *int64     `json:"source_pos"`
	SourceTime *time.Time `json:"source_time"`
	AppliedAt  *time.Time `json:"applied_at"`
}

// LoadStatus reads the roster's counts from pool and, for each topic, the
// lag of group from adm. topics empty: the topics roster_positions
// names.
func LoadStatus(ctx context.Context, pool *pgxpool.Pool, adm *kadm.Client, group string, topics []string) (Status, error) {
	var s Status
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM users),
		       (SELECT count(*) FROM courses WHERE deleted_at IS NULL),
		       (SELECT count(*) FROM courses WHERE deleted_at IS NOT NULL),
		       (SELECT count(*) FROM enrollments WHERE dropped_at IS NULL),
		       (SELECT count(*) FROM enrollments WHERE dropped_at IS NOT NULL),
		       coalesce((SELECT n FROM roster_counters WHERE kind = $1), 0),
		       coalesce((SELECT n FROM roster_counters WHERE kind = $2), 0)`, CounterErasures, CounterDLQ).
		Scan(&s.Users, &s.Courses, &s.CoursesDeleted, &s.EnrollmentsActive, &s.EnrollmentsEnded, &s.Erasures, &s.DLQ)
	if err != nil {
		return s, fmt.Errorf("roster counts: %w", err)
	}
	byTopic := map[string]*TopicStatus{}
	rows, err := pool.Query(ctx, `
		SELECT topic, max(source_pos), max(source_time), max(applied_at) FROM roster_positions GROUP BY topic ORDER BY topic`)
	if err != nil {
		return s, fmt.Errorf("roster positions: %w", err)
	}
	for rows.Next() {
		ts := &TopicStatus{}
		if err := rows.Scan(&ts.Topic, &ts.SourcePos, &ts.SourceTime, &ts.AppliedAt); err != nil {
			rows.Close()
			return s, fmt.Errorf("roster positions: %w", err)
		}
		byTopic[ts.Topic] = ts
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("roster positions: %w", err)
	}
	if len(topics) == 0 {
		for t := range byTopic {
			topics = append(topics, t)
		}
		sort.Strings(topics)
	}
	s.Lag = map[string]int64{}
	if len(topics) == 0 {
		return s, nil
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return s, fmt.Errorf("end offsets of %v: %w", topics, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return s, fmt.Errorf("start offsets of %v: %w", topics, err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil {
		return s, fmt.Errorf("offsets of group %s: %w", group, err)
	}
	for _, t := range topics {
		ts := byTopic[t]
		if ts == nil {
			ts = &TopicStatus{Topic: t}
		}
		for p, end := range ends[t] {
			if end.Err != nil {
				return s, fmt.Errorf("topic %s[%d]: %w", t, p, end.Err)
			}
			ts.Partitions++
			from := starts[t][p].Offset
			if o, ok := committed.Lookup(t, p); ok && o.Err == nil && o.At >= 0 {
				from = max(from, o.At)
			}
			ts.Lag += max(end.Offset-from, 0)
		}
		s.Lag[t] = ts.Lag
		s.Topics = append(s.Topics, *ts)
	}
	return s, nil
}

// WriteText writes s as the status table.
func (s Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "users\t%d\n", s.Users)
	fmt.Fprintf(tw, "courses\t%d\t(%d deleted)\n", s.Courses, s.CoursesDeleted)
	fmt.Fprintf(tw, "enrollments\t%d active\t%d ended\n", s.EnrollmentsActive, s.EnrollmentsEnded)
	fmt.Fprintf(tw, "erasures\t%d\n", s.Erasures)
	fmt.Fprintf(tw, "dead letters\t%d\n", s.DLQ)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Topics) == 0 {
		_, err := fmt.Fprintln(w, "\nno topic applied yet")
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tLAG\tSOURCE POS\tSOURCE TIME\tAPPLIED")
	for _, t := range s.Topics {
		pos, at, applied := "-", "-", "-"
		if t.SourcePos != nil {
			pos = fmt.Sprint(*t.SourcePos)
		}
		if t.SourceTime != nil {
			at = t.SourceTime.UTC().Format(time.RFC3339)
		}
		if t.AppliedAt != nil {
			applied = t.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", t.Topic, t.Partitions, t.Lag, pos, at, applied)
	}
	return tw.Flush()
}
