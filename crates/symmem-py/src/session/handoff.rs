//! The hand-over between the Python thread and the session thread: the Python thread's end of
//! the session ([`Handle`], in [`HANDLE`]), the session thread itself
//! ([`start_session_thread`]: one request at a time), each request's answer ([`Answer`],
//! [`Pending`]) and late end ([`settle`]), poisoning, and the refusal of a forked child
//! ([`OWNER_PID`]).
//!
//! Who touches what: the session lives on the session thread and is reached only through a
//! request ([`Job`]). [`HANDLE`] is locked by the Python thread that started the session (its
//! owner: every other thread is refused) and by the session thread only to clear `busy` as it
//! answers ([`Answer::send`]); no one holds it across a wait. [`OWNER_PID`] is read without
//! the lock, so that a fork is refused before it touches anything its parent's threads may have
//! held. One request at a time: a call is refused while another has not answered, and waits
//! for the end of the last one before it is sent.

use super::provider::AnySession;
use super::{Fail, Info};
use crate::trace;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, mpsc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// One request to the session thread: runs with the session (`None` before `init` succeeded).
type Job = Box<dyn FnOnce(&mut Option<AnySession>) + Send>;

/// The Python thread's end of the session. The session itself lives on a thread of its own
/// (it never moves: the GPU provider and its current device stay on that thread), which runs
/// one request at a time, so that the Python thread can wait in short slices and take a
/// Ctrl-C (see [`Pending`]).
struct Handle {
    /// The Python thread that started the session: the only one that may use it.
    owner: ThreadId,
    jobs: mpsc::Sender<Job>,
    /// Set once `init` succeeded (`finalized` kept current).
    info: Option<Info>,
    /// Why the session refuses every request: a collective was abandoned mid-way.
    poisoned: Option<String>,
    /// A request was sent and has not answered yet.
    busy: bool,
    /// The end of the last request, which may come after its answer (allocate completes its
    /// table meanwhile); taken by [`settle`], or before the next call.
    settling: Option<mpsc::Receiver<Result<(), Fail>>>,
}

/// Where a request's answer goes. The session thread sends it as soon as it is known; the
/// request may go on afterwards (allocate's table is completed while Python wraps the
/// tensors), and ends with a late outcome that the Python thread takes before its next call.
pub struct Answer<R>(Option<mpsc::Sender<Result<R, Fail>>>);

impl<R> Answer<R> {
    /// Sends the answer (once: later answers are dropped).
    pub(super) fn send(&mut self, result: Result<R, Fail>) {
        let Some(tx) = self.0.take() else {
            return;
        };
        // Before the answer: the Python thread may call again as soon as it has it.
        if let Some(h) = handle().as_mut() {
            h.busy = false;
        }
        trace::mark("session: answer sent");
        let _ = tx.send(result);
    }
}

static HANDLE: Mutex<Option<Handle>> = Mutex::new(None);
/// How long either end of a hand-over spins for the other before it blocks: the session thread
/// for the next request, the Python thread for the answer. Longer than one allocate + free at
/// 1 PE (about 25 us on an H200) and the Python between two calls; a rank that waits longer
/// (collectives of several PEs take milliseconds) sleeps as before.
pub const HANDOFF_SPIN: Duration = Duration::from_micros(100);

/// Receives from `rx`, spinning at most [`HANDOFF_SPIN`]. `Timeout`: nothing came meanwhile.
fn spin_recv<T>(rx: &mpsc::Receiver<T>) -> Result<T, mpsc::RecvTimeoutError> {
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(value) => return Ok(value),
            Err(mpsc::TryRecvError::Disconnected) => {
                return Err(mpsc::RecvTimeoutError::Disconnected);
            }
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < HANDOFF_SPIN => {
                // Yields rather than burns: where ranks outnumber cores, the thread that has
                // the work to do (a peer's collective) gets the core.
                std::thread::yield_now();
            }
            Err(mpsc::TryRecvError::Empty) => return Err(mpsc::RecvTimeoutError::Timeout),
        }
    }
}

/// The session thread's next request (spinning briefly, then blocking); `None` when the
/// Python side is gone.
fn next_job(queue: &mpsc::Receiver<Job>) -> Option<Job> {
    match spin_recv(queue) {
        Ok(job) => Some(job),
        Err(mpsc::RecvTimeoutError::Disconnected) => None,
        Err(mpsc::RecvTimeoutError::Timeout) => queue.recv().ok(),
    }
}

/// Starts the session thread unless it runs already: the calling thread becomes the owner of
/// the session, and this process the one that may use it.
pub(super) fn start_session_thread() -> Result<(), Fail> {
    let mut guard = handle();
    if guard.is_none() {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("symmem-session".into())
            .spawn(move || {
                let mut session = None;
                while let Some(job) = next_job(&queue) {
                    job(&mut session);
                }
            })
            .map_err(|e| Fail::Symmem(format!("cannot start symmem's session thread: {e}")))?;
        *guard = Some(Handle {
            owner: std::thread::current().id(),
            jobs,
            info: None,
            poisoned: None,
            busy: false,
            settling: None,
        });
        OWNER_PID.store(std::process::id(), Ordering::Release);
    }
    Ok(())
}

/// The process that started the session (0: none). Read without the lock: a forked child
/// must be refused before it touches anything its parent's threads may have held.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

fn handle() -> std::sync::MutexGuard<'static, Option<Handle>> {
    HANDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A forked child of the process that started the session gets an error: it shares its
/// parent's control sockets, and its calls would speak for its parent's rank.
pub(super) fn refuse_a_fork() -> Result<(), Fail> {
    let owner = OWNER_PID.load(Ordering::Acquire);
    let me = std::process::id();
    if owner != 0 && owner != me {
        return Err(Fail::Symmem(format!(
            "symmem was initialised in process {owner}, and this process ({me}) is a fork of \
             it: a fork must not use its parent's session (it would act as the parent's rank \
             towards the other ranks). Use symmem in the parent only, or start workers with \
             multiprocessing's 'spawn' method"
        )));
    }
    Ok(())
}

/// A request sent to the session thread; its answer arrives through [`Pending::wait`].
pub struct Pending<R> {
    answer: mpsc::Receiver<Result<R, Fail>>,
    what: &'static str,
    done: bool,
}

impl<R> Pending<R> {
    /// The answer, if it arrives within `slice`. With `spin`, it is first awaited by spinning
    /// that long (an answer that comes within microseconds is then taken without the sleep and
    /// wake-up of a blocking receive).
    pub fn wait(&mut self, spin: bool, slice: Duration) -> Option<Result<R, Fail>> {
        let polled = if spin {
            spin_recv(&self.answer)
        } else {
            Err(mpsc::RecvTimeoutError::Timeout)
        };
        let answer = match polled.or_else(|_| self.answer.recv_timeout(slice)) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => return None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Fail::Symmem(format!(
                "symmem's session thread ended during symmem.{}(); start a new process",
                self.what
            ))),
        };
        self.done = true;
        Some(answer)
    }

    /// The answer if it is there already (no wait, no spin).
    pub fn ready(&mut self) -> Option<Result<R, Fail>> {
        let answer = self.answer.try_recv().ok()?;
        self.done = true;
        Some(answer)
    }

    /// The caller stops waiting (`why`: a KeyboardInterrupt): the request runs on, and
    /// whether it completed on every rank is unknown, so the session refuses everything
    /// afterwards. Returns the message later calls get.
    pub fn abandon(mut self, why: &str) -> String {
        self.done = true;
        poison(format!(
            "symmem.{}() was interrupted ({why}) while it waited for the other ranks: whether \
             it completed on every rank is unknown, so this process's symmem session refuses \
             every later call; end this process (and the job) and start again",
            self.what
        ))
    }
}

impl<R> Drop for Pending<R> {
    fn drop(&mut self) {
        if !self.done {
            poison(format!(
                "symmem.{}() was abandoned while it ran: its outcome is unknown; start a new \
                 process",
                self.what
            ));
        }
    }
}

/// Makes the session refuse every later call with `message` (the first reason stays).
fn poison(message: String) -> String {
    match handle().as_mut() {
        Some(h) => h.poisoned.get_or_insert(message).clone(),
        None => message,
    }
}

/// Waits for the end of the last request unless the Python thread took it ([`settle`]): no
/// call runs, and nothing is read from the index, before allocate's table is complete.
fn settle_previous() -> Result<(), Fail> {
    let done = match handle().as_mut() {
        // A request still to answer (a signal handler calling in) was preceded by this wait.
        Some(h) if !h.busy => h.settling.take(),
        _ => None,
    };
    match done.map(|done| done.recv()) {
        Some(Ok(late)) => late.map_err(late_failure),
        // Nothing left to wait for, or the session thread is gone (the next request says so).
        None | Some(Err(_)) => Ok(()),
    }
}

/// A request's late failure as the Python thread takes it (a table that did not reach the
/// device, whose tensor Python may hold already), with the session poisoned by it.
pub fn late_failure(fail: Fail) -> Fail {
    Fail::Symmem(poison(format!(
        "{}: the device is unusable for this process, so its symmem session refuses every \
         later call; end this process (and the job)",
        fail.message()
    )))
}

/// The end of the last request, for the Python thread to wait on (`None`: taken already).
pub fn settle() -> Result<Option<Pending<()>>, Fail> {
    refuse_a_fork()?;
    let mut guard = handle();
    let h = usable(guard.as_mut())?;
    if h.busy {
        return Ok(None);
    }
    Ok(h.settling.take().map(|answer| Pending {
        answer,
        what: "allocate_symmetric",
        done: false,
    }))
}

/// Sends `f` to the session thread after the checks every call makes (not a fork, the owner
/// thread, not poisoned, not re-entered, and initialised unless `what` is `init`), once the
/// last request has ended. `f` answers through its [`Answer`] and may go on: what it returns
/// is the late outcome ([`settle`]); a request that returns before it answered answers with
/// what it returned.
fn submit_late<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut Option<AnySession>, &mut Answer<R>) -> Result<(), Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    refuse_a_fork()?;
    settle_previous()?;
    let mut guard = handle();
    let h = usable(guard.as_mut())?;
    if h.busy {
        return Err(Fail::Symmem(
            "symmem was called again while a call was in progress".into(),
        ));
    }
    if h.info.is_none() && what != "init" {
        return Err(Fail::Symmem("symmem is not initialised".into()));
    }
    let (tx, answer) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let job: Job = Box::new(move |slot| {
        trace::mark("session: request taken");
        let mut reply = Answer(Some(tx));
        let late = f(slot, &mut reply);
        let late = if reply.0.is_some() {
            reply.send(Err(late.err().unwrap_or_else(|| {
                Fail::Symmem(
                    "a symmem request ended without an answer (a symmem bug: report it)".into(),
                )
            })));
            Ok(())
        } else {
            late
        };
        trace::mark("session: request ended");
        let _ = done_tx.send(late);
    });
    trace::mark("python: request sent");
    h.jobs
        .send(job)
        .map_err(|_| Fail::Symmem("symmem's session thread is gone; start a new process".into()))?;
    h.busy = true;
    h.settling = Some(done);
    Ok(Pending {
        answer,
        what,
        done: false,
    })
}

/// [`submit_late`] of a request that ends with its answer.
pub(super) fn submit<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut Option<AnySession>) -> Result<R, Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    submit_late(what, move |slot, answer| {
        answer.send(f(slot));
        Ok(())
    })
}

/// [`submit_late`] of a request that needs the running session.
pub(super) fn with_session_late<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut AnySession, &mut Answer<R>) -> Result<(), Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    submit_late(what, move |slot, answer| match slot.as_mut() {
        Some(session) => f(session, answer),
        None => Err(Fail::Symmem("symmem is not initialised".into())),
    })
}

/// [`submit`] of a request that needs the running session.
pub(super) fn with_session<R: Send + 'static>(
    what: &'static str,
    f: impl FnOnce(&mut AnySession) -> Result<R, Fail> + Send + 'static,
) -> Result<Pending<R>, Fail> {
    with_session_late(what, move |session, answer| {
        answer.send(f(session));
        Ok(())
    })
}

/// Waits for a request that returns at once (no collective), holding the GIL if the caller
/// does: the session thread never needs it.
pub(super) fn now<R>(mut pending: Pending<R>) -> Result<R, Fail> {
    pending.done = true;
    pending.answer.recv().unwrap_or_else(|_| {
        Err(Fail::Symmem(format!(
            "symmem's session thread ended during symmem.{}(); start a new process",
            pending.what
        )))
    })
}

/// Records what `init`'s request gave: the session's description, or (on failure) nothing,
/// so that `init` may be tried again.
pub fn finish_init(answer: Result<Info, Fail>) -> Result<bool, Fail> {
    let mut guard = handle();
    match answer {
        Ok(info) => {
            if let Some(h) = guard.as_mut() {
                h.info = Some(info);
            }
            Ok(true)
        }
        Err(e) => {
            if guard
                .as_ref()
                .is_some_and(|h| h.info.is_none() && h.poisoned.is_none())
            {
                // Ends the session thread; a later init starts afresh.
                *guard = None;
                OWNER_PID.store(0, Ordering::Release);
            }
            Err(e)
        }
    }
}

/// The running session, or `None` before `init`. Answered by the Python thread's end alone,
/// so it works while the session is poisoned.
pub fn info() -> Result<Option<Info>, Fail> {
    refuse_a_fork()?;
    let guard = handle();
    let Some(h) = guard.as_ref() else {
        return Ok(None);
    };
    if h.info.is_some() && h.owner != std::thread::current().id() {
        return Err(Fail::Symmem(
            "symmem was initialised on another thread: call it from that thread only (the \
             session and the GPU's current device belong to one thread)"
                .into(),
        ));
    }
    Ok(h.info.clone())
}

/// The session's handle, if this thread may use it: started, from its owner thread, not
/// poisoned.
fn usable<H: std::ops::Deref<Target = Handle>>(handle: Option<H>) -> Result<H, Fail> {
    let Some(h) = handle else {
        return Err(Fail::Symmem(
            "symmem is not initialised: call symmem.init() (or allocate) first".into(),
        ));
    };
    if h.owner != std::thread::current().id() {
        return Err(Fail::Symmem(
            "symmem was initialised on another thread: call it from that thread only (the \
             session and the GPU's current device belong to one thread)"
                .into(),
        ));
    }
    if let Some(why) = &h.poisoned {
        return Err(Fail::Symmem(why.clone()));
    }
    Ok(h)
}

/// The checks every call makes (not a fork, initialised, the owner thread, not poisoned), for
/// a call the Python thread answers itself from the [`index`](super::index). Returns whether
/// the session was finalized.
pub(super) fn check_reader() -> Result<bool, Fail> {
    refuse_a_fork()?;
    settle_previous()?;
    let guard = handle();
    let h = usable(guard.as_ref())?;
    match &h.info {
        Some(info) => Ok(info.finalized),
        None => Err(Fail::Symmem("symmem is not initialised".into())),
    }
}

/// `finalize`'s request completed: the session's description says so from now on.
pub fn finish_finalize() {
    if let Some(info) = handle().as_mut().and_then(|h| h.info.as_mut()) {
        info.finalized = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_takes_what_is_sent_and_tells_empty_from_gone() {
        let (tx, rx) = mpsc::channel();
        tx.send(5).unwrap();
        assert_eq!(spin_recv(&rx).unwrap(), 5);
        assert_eq!(spin_recv(&rx), Err(mpsc::RecvTimeoutError::Timeout));
        drop(tx);
        assert_eq!(spin_recv(&rx), Err(mpsc::RecvTimeoutError::Disconnected));
        // Sent from another thread while the receiver spins.
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || tx.send(7).unwrap());
        let got = spin_recv(&rx).or_else(|_| rx.recv_timeout(Duration::from_secs(10)));
        assert_eq!(got.unwrap(), 7);
        sender.join().unwrap();
    }
}
