//! Panics turned into values: every clause, parser and backend call the
//! runner makes goes through [`guarded`], so a panic below it becomes a
//! Broken result instead of ending the run.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Chains a panic hook that, on threads inside [`guarded`], records the
/// message and location instead of printing them (printing still happens
/// when `RUST_BACKTRACE` is set). Other threads see the previous hook.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let capturing = CAPTURING.try_with(Cell::get).unwrap_or(false);
            if capturing {
                let msg = payload_message(info.payload());
                let msg = match info.location() {
                    Some(loc) => format!("{msg} (at {}:{})", loc.file(), loc.line()),
                    None => msg,
                };
                let _ = LAST_PANIC.try_with(|l| *l.borrow_mut() = Some(msg));
                if std::env::var_os("RUST_BACKTRACE").is_some() {
                    previous(info);
                }
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Run `f`; a panic becomes `Err(message with location)`.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let was = CAPTURING.with(|c| c.replace(true));
    LAST_PANIC.with(|l| l.borrow_mut().take());
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CAPTURING.with(|c| c.set(was));
    result.map_err(|payload| {
        LAST_PANIC
            .with(|l| l.borrow_mut().take())
            .unwrap_or_else(|| payload_message(payload.as_ref()))
    })
}
