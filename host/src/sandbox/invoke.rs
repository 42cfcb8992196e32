//! Running a tool body: a fresh store, the instance, the `invoke` export,
//! raced against the call's deadline and cancellation.
//!
//! A body with file system access runs on a thread of its own, and one
//! stuck there in a host system call is abandoned after [`STUCK_GRACE`];
//! abandoned bodies may hold at most half the instance pool (see
//! [`Invoker::invoke`]). This module decides nothing about whether a call
//! may run: by the time a body is invoked every check of the pipeline has
//! passed. It is reachable only from inside the crate, so that no body runs
//! around the pipeline.

use crate::sandbox::bindings::{ContentBlock, ToolOutput, ToolProviderPre};
use crate::sandbox::engine::{EpochTicker, RuntimeOptions};
use crate::sandbox::scratch::ScratchPool;
use crate::sandbox::spec::SandboxSpec;
use crate::sandbox::state::{Interrupt, ProgressSink};
use crate::sandbox::store::{CallState, Footprint, NetWitness, Receipt, Run, StoreBuilder};
use crate::tools::descriptor::ContentItem;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use toolhost_core::{ErrorCode, SandboxMode};
use wasmtime::Engine;

/// How long after its deadline (or cancellation, or its call being dropped
/// by its caller) a body stuck in a host file system call is abandoned.
pub const STUCK_GRACE: Duration = Duration::from_millis(100);

/// How long a body whose call was dropped may take to stop before it is
/// taken as stuck and abandoned. Longer than [`STUCK_GRACE`]: until then
/// the calls behind it wait for it, where an abandoned body would have them
/// refused, so a stopping body slow to get a CPU is waited for.
const DROPPED_GRACE: Duration = Duration::from_secs(1);

/// The raw outcome of running a body.
#[derive(Debug)]
pub enum BodyOutcome {
    /// The tool returned a result.
    Ok {
        /// The canonical JSON value.
        canonical: serde_json::Value,
        /// Model-visible content.
        content: Vec<ContentItem>,
        /// UI metadata.
        meta: Option<serde_json::Value>,
    },
    /// The call failed with a stable code.
    Err {
        /// The code.
        code: ErrorCode,
        /// A message the model can act on.
        message: String,
    },
}

/// What running bodies needs from the runtime; cheap to clone onto a
/// body's own thread. Whoever holds one keeps the epoch ticking.
#[derive(Clone)]
pub(crate) struct Invoker {
    engine: Engine,
    options: Arc<RuntimeOptions>,
    /// Bodies abandoned in a host system call whose threads have not
    /// returned yet (see [`Invoker::invoke`]).
    abandoned: Arc<AtomicUsize>,
    /// Scratch directories kept for later `workspace-write` calls.
    scratch: Arc<ScratchPool>,
    _ticker: Arc<EpochTicker>,
}

impl Invoker {
    pub(crate) fn new(engine: Engine, options: RuntimeOptions, ticker: EpochTicker) -> Invoker {
        Invoker {
            engine,
            options: Arc::new(options),
            abandoned: Arc::new(AtomicUsize::new(0)),
            scratch: Arc::default(),
            _ticker: Arc::new(ticker),
        }
    }

    pub(crate) fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    /// A fresh store built by `builder` on this runtime's engine.
    pub(crate) fn store(&self, builder: &StoreBuilder<'_>) -> Result<Run, (ErrorCode, String)> {
        builder.build(&self.engine, &self.options, &self.scratch)
    }

    /// Bodies abandoned in a host system call whose threads have not
    /// returned yet.
    pub(crate) fn abandoned(&self) -> usize {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// How many abandoned bodies make [`Invoker::invoke`] refuse calls with
    /// file system access: half the pool, at least one.
    pub(crate) fn abandon_limit(&self) -> usize {
        (self.options.max_concurrent_calls as usize / 2).max(1)
    }

    /// Why a body with file system access is refused now, if it is: half
    /// the pool ([`Invoker::abandon_limit`]) is held by abandoned bodies.
    pub(crate) fn refuses_file_access(&self) -> Option<String> {
        let abandoned = self.abandoned();
        (abandoned >= self.abandon_limit()).then(|| {
            format!(
                "{abandoned} earlier calls are still blocked in host file system calls \
                 (abandoned after their deadline, cancellation or drop) and hold half of the \
                 instance pool; calls with file system access are refused until they return"
            )
        })
    }

    /// Runs the body of `tool` once, in a fresh store built for `spec`.
    ///
    /// A body with file system access (any mode but `none`) runs on its own
    /// blocking thread, where its file operations are done in place instead
    /// of each being handed to tokio's blocking pool and back (one hand-off
    /// per call instead of one per operation; figures in BENCHMARKS.md).
    /// The deadline and cancellation still hold: they are raced
    /// on that thread as everywhere else, and a body stuck in a host file
    /// system call (a FIFO without a writer, a hung network mount), which
    /// nothing can interrupt, is abandoned [`STUCK_GRACE`] after its
    /// deadline or cancellation: the call ends `TIMEOUT` or `CANCELLED`
    /// then, and the thread and its instance are released when the system
    /// call returns.
    ///
    /// Each abandoned body holds an instance slot of the pool until then. So
    /// that they cannot take the whole pool, once half of it
    /// ([`Invoker::abandon_limit`]) is held by abandoned bodies, calls with
    /// file system access are refused `SANDBOX_UNAVAILABLE` before their
    /// body starts, until some of those bodies return; calls in mode `none`
    /// keep the other half of the pool (the exclusivity gate may still
    /// refuse them, see `host::gate`). (The check and the abandonment are not one
    /// atomic step: calls already running when the limit is reached may
    /// still be abandoned, at most the pool's size in all.)
    pub(crate) async fn invoke(&self, body: Body<'_>, watch: Watch) -> (BodyOutcome, Receipt) {
        let Watch {
            interrupt,
            progress,
            on_abandon,
            witness,
        } = watch;
        let spec = body.spec;
        if spec.mode == SandboxMode::None {
            return self
                .invoke_here(body, interrupt, progress, &witness, false)
                .await;
        }
        let (invoker, pre, needs) = (self.clone(), body.pre.clone(), body.needs.copied());
        let (tool, args_json) = (body.tool.to_string(), body.args_json.to_string());
        let body_witness = witness.clone();
        self.on_own_thread(
            spec,
            interrupt,
            on_abandon,
            witness,
            move |spec, interrupt| async move {
                let body = Body {
                    pre: &pre,
                    needs: needs.as_ref(),
                    tool: &tool,
                    args_json: &args_json,
                    spec: &spec,
                };
                invoker
                    .invoke_here(body, interrupt, progress, &body_witness, true)
                    .await
            },
        )
        .await
    }

    /// Runs the body that `make` builds on a blocking thread of its own,
    /// whose file operations block in place, and waits for it until its
    /// deadline (or cancellation) and [`STUCK_GRACE`] have passed; a body
    /// still running then is stuck in a host system call and is abandoned
    /// (see [`Invoker::invoke`]). Both component bodies with file access
    /// and program bodies run this way. `make` gets the body's spec and
    /// interrupt; `witness` is its store's (the store `make` builds shares
    /// its network with it): an abandoned body's call still reports the
    /// network records and `denied` lines so far.
    pub(crate) async fn on_own_thread<F, Fut>(
        &self,
        spec: &SandboxSpec,
        interrupt: Interrupt,
        on_abandon: Option<OnAbandon>,
        witness: NetWitness,
        make: F,
    ) -> (BodyOutcome, Receipt)
    where
        F: FnOnce(SandboxSpec, Interrupt) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = (BodyOutcome, Receipt)>,
    {
        let started = Instant::now();
        // The call ends without its body's result (refused, or abandoned:
        // then with what the body's network did so far).
        let stuck = |code: ErrorCode, message: &str| {
            let receipt = witness.receipt(spec.mode, started);
            (
                BodyOutcome::Err {
                    code,
                    message: message.to_string(),
                },
                receipt,
            )
        };
        if let Some(why) = self.refuses_file_access() {
            return stuck(ErrorCode::SandboxUnavailable, &why);
        }
        // The body's own interrupt: cancelled with the call's, and alone
        // when the call is dropped while its body runs (below).
        let (mut body_spec, body_interrupt) = (spec.clone(), interrupt.child());
        let stop = body_interrupt.clone();
        let handle = tokio::runtime::Handle::current();
        // The call's deadline counts from now, not from when the pool gets
        // to the body: a body that starts late runs only for what is left,
        // and one whose call has already ended (abandoned at the backstop,
        // or cancelled) never starts. Otherwise a body queued behind busy
        // threads could run in full after its call was reported TIMEOUT.
        let call_deadline = Instant::now() + spec.limits.deadline;
        let given_up = Arc::new(AtomicBool::new(false));
        let too_late = given_up.clone();
        let mode = spec.mode;
        let kept = Arc::new(Kept {
            state: std::sync::Mutex::new(KeptState::Waited),
            abandoned: self.abandoned.clone(),
        });
        // Moved into the body's closure: dropped when the thread returns, or
        // with the closure if it never runs (a runtime shutting down).
        let returns = Returns(kept.clone());
        let body = tokio::task::spawn_blocking(move || {
            let _returns = returns;
            let left = call_deadline.saturating_duration_since(Instant::now());
            let not_run = |code: ErrorCode, message: &str| {
                (
                    BodyOutcome::Err {
                        code,
                        message: message.to_string(),
                    },
                    Receipt {
                        mode: Some(mode),
                        ..Receipt::default()
                    },
                )
            };
            if body_interrupt.is_cancelled() {
                return not_run(
                    ErrorCode::Cancelled,
                    "the call was cancelled before the tool started",
                );
            }
            if too_late.load(Ordering::SeqCst) || left.is_zero() {
                return not_run(
                    ErrorCode::Timeout,
                    "the call's deadline passed before the tool could start",
                );
            }
            body_spec.limits.deadline = left;
            handle.block_on(make(body_spec, body_interrupt))
        });
        let backstop = tokio::time::Instant::now() + spec.limits.deadline + STUCK_GRACE;
        // From here until the body's result is taken, the body is abandoned
        // if this future ends without it: given up at the backstop or after
        // cancellation, or dropped by its caller (a timeout around the
        // call, a transport that drops its handler). Either way the body's
        // thread goes on until it returns, and what the call holds for it
        // (its pass through the exclusivity gate) is kept until then.
        let mut waiting = Abandon {
            body: Some(body),
            given_up,
            kept,
            on_abandon,
            stop,
            handle: tokio::runtime::Handle::current(),
        };
        let ended = tokio::select! {
            biased;
            joined = &mut waiting => return joined.unwrap_or_else(|e| stuck(
                ErrorCode::Trap,
                &format!("the thread running the tool failed: {e}"),
            )),
            _ = tokio::time::sleep_until(backstop) => stuck(
                ErrorCode::Timeout,
                "the tool exceeded its deadline while blocked in a host file system call; \
                 the call was abandoned",
            ),
            _ = async {
                interrupt.cancelled().await;
                tokio::time::sleep(STUCK_GRACE).await;
            } => stuck(
                ErrorCode::Cancelled,
                "the call was cancelled while the tool was blocked in a host file system \
                 call; the call was abandoned",
            ),
        };
        waiting.abandon();
        ended
    }

    /// [`Invoker::invoke`] on the current thread, its store's network
    /// shared with `witness`; `blocking` (a body on a thread of its own,
    /// see [`Invoker::on_own_thread`]) lets the guest's file operations
    /// block it.
    async fn invoke_here(
        &self,
        body: Body<'_>,
        interrupt: Interrupt,
        progress: Option<ProgressSink>,
        witness: &NetWitness,
        blocking: bool,
    ) -> (BodyOutcome, Receipt) {
        let started = Instant::now();
        let mut builder = StoreBuilder::new(body.spec);
        builder
            .interrupt(interrupt)
            .progress(progress)
            .blocking(blocking)
            .witness(witness);
        let mut run = match self.store(&builder) {
            Ok(run) => run,
            Err((code, message)) => {
                return (BodyOutcome::Err { code, message }, Receipt::default());
            }
        };
        let (deadline, interrupt) = run.deadline();
        let store = &mut run.store;
        let raced = race(
            async {
                store.data().admit(body.needs)?;
                let bindings = body.pre.instantiate_async(&mut *store).await?;
                bindings
                    .toolhost_tool_tool()
                    .call_invoke(&mut *store, body.tool, body.args_json)
                    .await
            },
            deadline,
            &interrupt,
        )
        .await;
        let outcome = match run.finish(raced) {
            Err((code, message)) => BodyOutcome::Err { code, message },
            Ok(Err(e)) => BodyOutcome::Err {
                code: ErrorCode::ToolError,
                message: run.tool_error_text(&e.code, &e.message),
            },
            Ok(Ok(out)) => match run.check_output(&out) {
                Ok(()) => lift_output(out, run.take_attached()),
                Err((code, message)) => BodyOutcome::Err { code, message },
            },
        };
        let mut receipt = run.receipt();
        receipt.wall_us = started.elapsed().as_micros() as u64;
        (outcome, receipt)
    }
}

/// A body on its own thread that its call waits for. Given up (at the
/// backstop, after cancellation, or because the call was dropped by its
/// caller), the body may not start any more and is stopped: its own
/// interrupt is cancelled (a body stuck in a host system call stops when
/// that returns). What the call holds for it (its pass through the
/// exclusivity gate) is kept until the body's thread returns ([`Kept`]).
struct Abandon {
    body: Option<tokio::task::JoinHandle<(BodyOutcome, Receipt)>>,
    given_up: Arc<AtomicBool>,
    kept: Arc<Kept>,
    on_abandon: Option<OnAbandon>,
    stop: Interrupt,
    handle: tokio::runtime::Handle,
}

impl Abandon {
    /// Stops waiting for the body (if its result was not taken) and stops it.
    fn give_up(&mut self) -> Option<tokio::task::JoinHandle<(BodyOutcome, Receipt)>> {
        let body = self.body.take()?;
        self.given_up.store(true, Ordering::SeqCst);
        self.stop.cancel();
        Some(body)
    }

    /// Abandons the body now: it has outlived its deadline or cancellation
    /// by [`STUCK_GRACE`], so it is counted, and what `on_abandon` returns is
    /// kept, until its thread returns.
    fn abandon(&mut self) {
        if self.give_up().is_some() {
            self.kept.abandon(self.on_abandon.take());
        }
    }
}

/// The body's result, once its thread returns (the body is then no longer
/// this guard's to abandon).
impl std::future::Future for Abandon {
    type Output = Result<(BodyOutcome, Receipt), tokio::task::JoinError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else {
            return std::task::Poll::Pending;
        };
        let joined = std::task::ready!(std::pin::Pin::new(body).poll(cx));
        this.body = None;
        std::task::Poll::Ready(joined)
    }
}

/// The call was dropped by its caller while it waited for the body: the
/// body is stopped, and what the call holds for it is kept as it is (calls
/// that need the gate queue behind it, as behind any running body). A body
/// still running [`DROPPED_GRACE`] later is stuck: it is abandoned then, as
/// at a deadline (counted, and calls it blocks refused). That check is a task;
/// if the runtime is shutting down and never runs it, the body is only not
/// counted: what the call held is still kept until its thread returns.
impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(mut body) = self.give_up() else {
            return;
        };
        if !self.kept.dropped(self.on_abandon.take()) {
            return;
        }
        let kept = self.kept.clone();
        self.handle.spawn(async move {
            if tokio::time::timeout(DROPPED_GRACE, &mut body)
                .await
                .is_err()
            {
                kept.abandon(None);
            }
        });
    }
}

/// What a call keeps for a body on its own thread that it stopped waiting
/// for, until the body's thread returns: the thread itself lets it go
/// ([`Returns`]), so that nothing depends on a task a runtime shutting down
/// would never run.
struct Kept {
    state: std::sync::Mutex<KeptState>,
    /// The runtime's count of abandoned bodies.
    abandoned: Arc<AtomicUsize>,
}

enum KeptState {
    /// The call waits for the body.
    Waited,
    /// The call was dropped: its hold, not yet taken as an abandonment.
    Dropped(OnAbandon),
    /// Abandoned: counted, with what `on_abandon` returned.
    Abandoned(#[allow(dead_code, reason = "held for its drop")] Box<dyn Send>),
    /// The body's thread returned.
    Returned,
}

impl Kept {
    /// Keeps `hold` for a body whose call was dropped; false (and `hold`
    /// let go at once) if its thread has returned already.
    fn dropped(&self, hold: Option<OnAbandon>) -> bool {
        let mut state = crate::sandbox::state::lock(&self.state);
        let (running, unheld) = match (&*state, hold) {
            (KeptState::Returned, hold) => (false, hold),
            (KeptState::Waited, Some(hold)) => {
                *state = KeptState::Dropped(hold);
                (true, None)
            }
            (_, hold) => (true, hold),
        };
        drop(state);
        drop(unheld);
        running
    }

    /// Abandons the body unless its thread has returned: counts it, and
    /// keeps what its hold (the one kept by [`Kept::dropped`], else
    /// `on_abandon`) returns.
    fn abandon(&self, on_abandon: Option<OnAbandon>) {
        let mut state = crate::sandbox::state::lock(&self.state);
        let hold = match std::mem::replace(&mut *state, KeptState::Returned) {
            KeptState::Returned => return,
            abandoned @ KeptState::Abandoned(_) => {
                *state = abandoned;
                return;
            }
            KeptState::Dropped(hold) => Some(hold),
            KeptState::Waited => on_abandon,
        };
        let kept: Box<dyn Send> = match hold {
            Some(hold) => hold(),
            None => Box::new(()),
        };
        *state = KeptState::Abandoned(kept);
        self.abandoned.fetch_add(1, Ordering::SeqCst);
    }
}

/// Held by a body's thread (moved into its closure): when the thread
/// returns, or the closure is dropped without running, what was kept for
/// the body is let go and an abandoned body is counted back.
struct Returns(Arc<Kept>);

impl Drop for Returns {
    fn drop(&mut self) {
        let was = std::mem::replace(
            &mut *crate::sandbox::state::lock(&self.0.state),
            KeptState::Returned,
        );
        if let KeptState::Abandoned(_) = was {
            self.0.abandoned.fetch_sub(1, Ordering::SeqCst);
        }
        drop(was);
    }
}

/// What a call does when it gives up on its body (stuck in a host system
/// call past its deadline or cancellation): the value it returns is kept
/// until the body's thread returns (the call's pass through the exclusivity
/// gate, so that nothing exclusive overlaps a body that still runs).
pub(crate) type OnAbandon = Box<dyn FnOnce() -> Box<dyn Send> + Send>;

/// What the caller of a body gives it beside the body itself: how it is
/// cancelled, where its progress goes, and what is kept for it should the
/// call give up on it.
pub(crate) struct Watch {
    pub interrupt: Interrupt,
    pub progress: Option<ProgressSink>,
    pub on_abandon: Option<OnAbandon>,
    /// Shares the body's network records with the call.
    pub witness: NetWitness,
}

/// One body to run: the component, the tool, its arguments and its grant.
pub(crate) struct Body<'a> {
    /// The component, linked.
    pub pre: &'a ToolProviderPre<CallState>,
    /// What instantiating the component creates, when counted.
    pub needs: Option<&'a Footprint>,
    /// The tool to invoke.
    pub tool: &'a str,
    /// Its arguments (JSON text, already validated).
    pub args_json: &'a str,
    /// The call's mode, workspace and limits.
    pub spec: &'a SandboxSpec,
}

/// Runs `body` until it ends, the deadline passes or the call is cancelled.
/// `None` means the body was stopped from outside while it waited in a host
/// call (a CPU-bound guest is stopped by the epoch callback instead, and
/// ends with an error). When this returns, the future has been dropped.
pub(crate) async fn race<R>(
    body: impl std::future::Future<Output = wasmtime::Result<R>>,
    deadline: tokio::time::Instant,
    interrupt: &Interrupt,
) -> Option<wasmtime::Result<R>> {
    tokio::select! {
        biased;
        r = body => Some(r),
        _ = tokio::time::sleep_until(deadline) => None,
        _ = interrupt.cancelled() => None,
    }
}

/// A tool's result (already within the output cap) as the host's values,
/// the blocks it attached through `content.attach` after its text blocks;
/// `OUTPUT_INVALID` when `canonical` or `meta` is not JSON.
fn lift_output(out: ToolOutput, attached: Vec<ContentItem>) -> BodyOutcome {
    let canonical = match serde_json::from_str(&out.canonical) {
        Ok(v) => v,
        Err(e) => {
            return BodyOutcome::Err {
                code: ErrorCode::OutputInvalid,
                message: format!("the canonical output is not JSON: {e}"),
            };
        }
    };
    let meta = match out.meta.as_deref().map(serde_json::from_str).transpose() {
        Ok(m) => m,
        Err(e) => {
            return BodyOutcome::Err {
                code: ErrorCode::OutputInvalid,
                message: format!("meta is not JSON: {e}"),
            };
        }
    };
    let content = out
        .content
        .into_iter()
        .map(|ContentBlock::Text(text)| ContentItem::text(text))
        .chain(attached)
        .collect();
    BodyOutcome::Ok {
        canonical,
        content,
        meta,
    }
}

#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::NetworkGrant;
    use crate::sandbox::spec::Limits;

    /// An invoker without pooling or cache, and a spec with file access (so
    /// its bodies run on their own threads) and a long deadline.
    fn invoker_and_spec() -> (Invoker, SandboxSpec) {
        let options = RuntimeOptions {
            pooling: false,
            cache_dir: None,
            ..RuntimeOptions::default()
        };
        let engine = Engine::new(&crate::sandbox::engine::config(&options)).unwrap();
        let ticker = EpochTicker::start(&engine).unwrap();
        let spec = SandboxSpec {
            mode: SandboxMode::ReadOnly,
            workspace: std::path::PathBuf::from("/"),
            limits: Limits {
                deadline: Duration::from_secs(60),
                ..Limits::default()
            },
            network: NetworkGrant::none(),
        };
        (Invoker::new(engine, options, ticker), spec)
    }

    /// What a call holds for a body (its gate pass, here a flag set when it
    /// is let go), and whether the call took it as an abandonment.
    fn hold() -> (OnAbandon, Arc<AtomicBool>, Arc<AtomicBool>) {
        struct Held(Arc<AtomicBool>);
        impl Drop for Held {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let released = Arc::new(AtomicBool::new(false));
        let abandoned = Arc::new(AtomicBool::new(false));
        let held = Held(released.clone());
        let taken = Arc::clone(&abandoned);
        let on_abandon: OnAbandon = Box::new(move || {
            taken.store(true, Ordering::SeqCst);
            Box::new(held)
        });
        (on_abandon, released, abandoned)
    }

    /// Waits (bounded) until `done`.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let waited = Instant::now();
        while !done() {
            assert!(waited.elapsed() < Duration::from_secs(20), "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn ok() -> (BodyOutcome, Receipt) {
        let outcome = BodyOutcome::Ok {
            canonical: serde_json::Value::Null,
            content: Vec::new(),
            meta: None,
        };
        (outcome, Receipt::default())
    }

    /// A call dropped while its body runs on its own thread stops the body
    /// (its interrupt): a body that heeds it returns at once, and what the
    /// call held for it is let go then, never taken as an abandonment (calls
    /// behind it queue rather than being refused). A body stuck where no
    /// interrupt reaches (a host system call) is abandoned after the grace:
    /// counted, its hold taken, and both let go only when its thread returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_call_stops_its_body_and_keeps_its_hold_until_the_thread_returns() {
        let (invoker, spec) = invoker_and_spec();

        let (on_abandon, released, abandoned) = hold();
        let (started, running) = tokio::sync::oneshot::channel();
        let heeds = invoker.on_own_thread(
            &spec,
            Interrupt::default(),
            Some(on_abandon),
            NetWitness::default(),
            {
                move |_, interrupt| async move {
                    let _ = started.send(());
                    interrupt.cancelled().await;
                    ok()
                }
            },
        );
        tokio::select! {
            _ = heeds => panic!("the body ended on its own"),
            _ = running => {}
        }
        until("the stopped body lets its hold go", || {
            released.load(Ordering::SeqCst)
        })
        .await;
        assert!(
            !abandoned.load(Ordering::SeqCst),
            "a stopped body was taken as abandoned"
        );
        assert_eq!(invoker.abandoned(), 0);

        let (on_abandon, released, abandoned) = hold();
        let (started, running) = tokio::sync::oneshot::channel();
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let stuck_body = invoker.on_own_thread(
            &spec,
            Interrupt::default(),
            Some(on_abandon),
            NetWitness::default(),
            {
                move |_, _| async move {
                    let _ = started.send(());
                    let _ = stuck.recv();
                    ok()
                }
            },
        );
        tokio::select! {
            _ = stuck_body => panic!("the body ended on its own"),
            _ = running => {}
        }
        until("the stuck body is abandoned", || invoker.abandoned() == 1).await;
        assert!(abandoned.load(Ordering::SeqCst));
        assert!(
            !released.load(Ordering::SeqCst),
            "let go while the body still runs"
        );
        release.send(()).unwrap();
        until("the returned body lets its hold go", || {
            released.load(Ordering::SeqCst)
        })
        .await;
        assert_eq!(invoker.abandoned(), 0);
    }

    /// A body queued behind a busy blocking pool until after its call was
    /// abandoned at the deadline never runs once the pool gets to it: the
    /// call was reported `TIMEOUT`, so nothing may happen after.
    #[test]
    fn a_body_that_could_not_start_before_its_deadline_never_runs() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (invoker, mut spec) = invoker_and_spec();
            spec.limits.deadline = Duration::from_millis(20);
            // The pool's only thread is busy until released.
            let (release, wait) = std::sync::mpsc::channel::<()>();
            let holder = tokio::task::spawn_blocking(move || {
                let _ = wait.recv();
            });
            let ran = Arc::new(AtomicBool::new(false));
            let body_ran = ran.clone();
            let (outcome, _) = invoker
                .on_own_thread(
                    &spec,
                    Interrupt::default(),
                    None,
                    NetWitness::default(),
                    move |_, _| async move {
                        body_ran.store(true, Ordering::SeqCst);
                        (
                            BodyOutcome::Ok {
                                canonical: serde_json::Value::Null,
                                content: Vec::new(),
                                meta: None,
                            },
                            Receipt::default(),
                        )
                    },
                )
                .await;
            assert!(
                matches!(
                    outcome,
                    BodyOutcome::Err {
                        code: ErrorCode::Timeout,
                        ..
                    }
                ),
                "{outcome:?}"
            );
            assert_eq!(invoker.abandoned(), 1);
            release.send(()).unwrap();
            holder.await.unwrap();
            // The queued body gets the thread now; it returns at once.
            let until = Instant::now() + Duration::from_secs(10);
            while invoker.abandoned() > 0 && Instant::now() < until {
                tokio::task::yield_now().await;
            }
            assert_eq!(invoker.abandoned(), 0, "the abandoned body never returned");
            assert!(
                !ran.load(Ordering::SeqCst),
                "the body ran after its call ended"
            );
        });
    }
}
