//! Every route driven in-process with the request shapes DI-engine sends (JSON without a
//! Content-Type, `gpus` as a string), against a fake API server that keeps the DIJob, checks
//! resourceVersions like the real one, lists the job's pods, and records every request. No
//! reconciler runs: a watch on the pods stays silent. The fake (`world`) can also misbehave (see
//! `world::Trouble`): conflicting writers, failing or unanswered pod reads, watches that end at once,
//! and writes held until the test lets them through. One test binary, a module per topic.

mod names;
mod queues;
mod routes;
mod waits;
mod world;
mod writes;
