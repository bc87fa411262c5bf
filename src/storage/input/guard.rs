//! Third-party decoders behind a guard: a panic inside one (the parquet
//! crate panics on some corrupt pages) becomes [`Error::MalformedInput`]
//! naming the file, instead of taking the process down.
//!
//! The first guarded call installs a panic hook that stays silent for
//! panics caught by a guard on the panicking thread and hands every other
//! panic to the hook that was installed before, so the CLI prints one
//! `error:` line. (With `panic = "abort"` nothing can be caught.)

use crate::error::{Error, Result};
use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Once;

thread_local! {
    /// Guards active on this thread: the hook stays silent while above 0.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

static QUIET_HOOK: Once = Once::new();

/// Runs `f`, turning a panic into [`Error::MalformedInput`] for `path`
/// (`what` says where in the file). The caller must not use state that
/// `f` touched after it panicked.
pub(super) fn guarded<T>(path: &Path, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.try_with(Cell::get).unwrap_or(0) == 0 {
                previous(info);
            }
        }));
    });
    GUARDED.with(|g| g.set(g.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    outcome.unwrap_or_else(|payload| {
        Err(Error::malformed(
            path,
            format!("{what}: the decoder failed: {}", panic_message(&*payload)),
        ))
    })
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_malformed_input_naming_the_file() {
        let err = guarded::<()>(Path::new("x.parquet"), "after row 7", || {
            panic!("Num of bytes exceed MAX_VLQ_BYTE_LEN (10)")
        })
        .unwrap_err();
        assert!(matches!(err, Error::MalformedInput { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "malformed input x.parquet: after row 7: the decoder failed: \
             Num of bytes exceed MAX_VLQ_BYTE_LEN (10)"
        );
        // The guard is released: a later panic on this thread is not caught.
        assert_eq!(GUARDED.with(Cell::get), 0);
        let fine = guarded(Path::new("x.parquet"), "open", || Ok(5)).unwrap();
        assert_eq!(fine, 5);
        let passed = guarded::<()>(Path::new("x.parquet"), "open", || {
            Err(Error::Internal("kept".into()))
        });
        assert!(matches!(passed, Err(Error::Internal(m)) if m == "kept"));
    }
}
