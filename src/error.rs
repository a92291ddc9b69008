//! Errors that decide swarm's exit code.
//!
//! Bad input (exit 2) is a [`BadInput`] carrying a message and, where there is one, a hint
//! that names the fix. Everything else travels as `anyhow::Error` with context and means
//! swarm itself failed (exit 1). The CLI edge tells them apart by downcasting.

use std::fmt;

/// The user asked for something swarm refuses to do; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput {
    pub message: String,
    pub hint: Option<String>,
}

impl BadInput {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BadInput {}

/// Shorthand for returning a [`BadInput`] from a function returning `anyhow::Result`.
#[macro_export]
macro_rules! bad_input {
    ($($arg:tt)*) => {
        ::anyhow::Error::from($crate::error::BadInput::new(format!($($arg)*)))
    };
}

/// Exit codes (docs/USAGE.md and README.md).
pub mod exit {
    pub const SUCCESS: i32 = 0;
    pub const PARTIAL: i32 = 1;
    pub const BAD_INPUT: i32 = 2;
    pub const INTERRUPTED: i32 = 130;
}
