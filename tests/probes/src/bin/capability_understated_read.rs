//! The `fs` tool declaring side effect `none` although it reads: the
//! `capability::capability_understated_read` test gives its calls
//! `read-only` under a policy that asks before reads, and checks that the
//! policy sees the call as a read (the grant lets it read), so
//! understating its side effect does not get it past the question.

#[path = "../shared/fsops.rs"]
#[macro_use]
mod fsops;

fs_probe!(None, None);
