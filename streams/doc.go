// Package streams is the shared Kafka vocabulary of notify: topic names and
// their settings, the message types carried on them and their codecs, client
// construction, and the consume-then-commit loop every consumer uses.
//
// Nothing here knows about Postgres or HTTP; services and the CDC connector
// build on it so that a topic name or a message field is defined exactly once.
package streams
