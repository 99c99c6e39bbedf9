// Package seed creates realistic data sets for development, tests and
// benchmarks: one instructor, one course, N enrolled students and their
// Web Push subscriptions, bulk-loaded with COPY. Subscription keys are
// derived deterministically (DeriveSubscriptionKeys) so a mock push service
// can decrypt what the pipeline sends without sharing any table. Shares of
// the students can be given preferences (Preferences, ApplyPreferences) in
// one set-based statement, for measuring the fan-out with them applied.
package seed
