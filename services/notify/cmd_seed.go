package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/notify-dev/notify/services/progress"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

func init() {
	register(command{name: "seed", summary: "load one course with N enrolled students and their push subscriptions", run: runSeed})
}

func runSeed(ctx context.Context, args []string) error {
	fs := newFlagSet("seed", "--users N [flags]")
	var inf infraFlags
	inf.register(fs, false)
	var o seed.Options
	fs.IntVar(&o.Users, "users", 0, "number of students to enroll (required)")
	fs.Float64Var(&o.SubsRatio, "subs-ratio", seed.DefaultSubsRatio, "push subscriptions per student; some students get 2–3 browsers")
	fs.Int64Var(&o.Seed, "seed", 1, "seed for ids and subscription keys (the mock push service needs the same value to decrypt)")
	fs.StringVar(&o.PushBaseURL, "push-base-url", seed.DefaultPushBaseURL, "endpoint prefix; the subscription id is appended")
	fs.Float64Var(&o.FCMRatio, "fcm-ratio", 0, "FCM (Android) devices per student, at most 1: on the first students, tokens the mock's FCM side recognises")
	fs.Float64Var(&o.APNsRatio, "apns-ratio", 0, "APNs (iOS) devices per student, at most 1: on the last students, deterministic hex tokens")
	fcmProject := fs.String("fcm-project", fcm.DevProjectID, "project_id the seeded FCM tokens belong to (the mock answers SENDER_ID_MISMATCH for another project's)")
	prefs := fs.String("preferences", "", "give shares of the students preferences, e.g. muted=0.2,quiet=0.3,type_rules=0.1[,capped=0.05]: disjoint groups, push off for the course / inside quiet hours now / type rules that leave the course's pushes on / one push an hour")
	quietEndsIn := fs.Duration("quiet-ends-in", seed.DefaultQuietEndsIn, "with --preferences quiet=…: the quiet hours end this long after the seed (they began an hour before it), in each student's zone")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a summary")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.Users < 1 {
		return usageError{msg: "--users N is required (N ≥ 1)"}
	}
	if *prefs != "" {
		p, err := seed.ParsePreferences(*prefs)
		if err != nil {
			return usageError{msg: "--preferences: " + strings.TrimPrefix(err.Error(), "preferences: ")}
		}
		if *quietEndsIn < time.Second || *quietEndsIn > seed.MaxQuietEndsIn {
			return usageError{msg: fmt.Sprintf("--quiet-ends-in must be between 1s and %s, got %s", seed.MaxQuietEndsIn, *quietEndsIn)}
		}
		p.QuietEndsIn = *quietEndsIn
		o.Preferences = &p
	}
	o.NoSubscriptions = o.SubsRatio == 0
	o.FCMToken = func(id int64) string { return pushmock.FCMToken(*fcmProject, id) }
	pool, err := inf.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	subs := o.Subscriptions()
	nFCM, nAPNs := o.AppDevices()
	fmt.Fprintf(os.Stderr, "seeding %d students, %d Web Push subscriptions, %d FCM and %d APNs devices (seed %d)\n", o.Users, subs, nFCM, nAPNs, o.Seed)
	pr := progress.New(os.Stderr, 0)
	o.Progress = func(p seed.Progress) {
		st := progress.Step{Done: p.Rows, Total: p.Total, Elapsed: p.Elapsed, Unit: "rows"}
		if p.Vacuuming {
			st.After = "vacuuming the seeded tables"
		}
		pr.Print(st)
	}
	res, err := seed.Load(ctx, pool, o)
	pr.Done()
	if errors.Is(err, seed.ErrAlreadySeeded) {
		return exitError{code: 3, msg: "the database already holds seed data; nothing was written. Use a fresh database (bash infra/local/reset.sh resets everything) or point --database-url elsewhere"}
	}
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("course          %s\ninstructor      %s\nstudents        %d\nsubscriptions   %d\nfcm devices     %d\napns devices    %d\nseed            %d\nseconds         %.1f\n",
		res.CourseID, res.InstructorID, res.Users, res.Subscriptions, res.FCMDevices, res.APNsDevices, res.Seed, res.Seconds)
	if c := res.Preferences; c != nil {
		fmt.Printf("preferences     muted %d, quiet %d, type rules %d, capped %d\n", c.Muted, c.Quiet, c.TypeRules, c.Capped)
		if c.Quiet > 0 {
			fmt.Printf("quiet hours end %s\n", c.QuietEnd.UTC().Format(time.RFC3339))
		}
	}
	fmt.Printf("\nnext: mint the instructor's token with  notify token --user %s\n", res.InstructorID)
	return nil
}
