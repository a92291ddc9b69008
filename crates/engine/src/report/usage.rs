//! What a task used besides its time: what an agent said it spent, and the allow-list
//! proxy's connections.

use serde::{Deserialize, Serialize};

use super::Tokens;

/// What an agent printed about its own spend (`--agent`), checked to be plausible: a negative,
/// NaN or absurd value is dropped, not stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reported {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
}

impl Reported {
    /// The most tokens one task plausibly uses (a trillion).
    const MAX_TOKENS: u64 = 1_000_000_000_000;
    /// The most dollars one task plausibly costs.
    const MAX_COST: f64 = 1_000_000.0;
    const MAX_TURNS: u32 = 1_000_000;

    /// What an agent said, with what is not plausible left out; `None` if nothing is left.
    pub fn plausible(tokens: Tokens, cost_usd: Option<f64>, turns: u32) -> Option<Self> {
        let reported = Self {
            tokens: (tokens != Tokens::default()
                && tokens.prompt <= Self::MAX_TOKENS
                && tokens.completion <= Self::MAX_TOKENS)
                .then_some(tokens),
            cost_usd: cost_usd.filter(|c| c.is_finite() && (0.0..=Self::MAX_COST).contains(c)),
            turns: (turns > 0 && turns <= Self::MAX_TURNS).then_some(turns),
        };
        (reported != Self::default()).then_some(reported)
    }
}

/// A task's use of the allow-list proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkUse {
    pub allowed: u32,
    pub refused: u32,
    /// `host:port` of the refused connections, each once.
    #[serde(default)]
    pub refused_hosts: Vec<String>,
}

impl NetworkUse {
    pub fn is_empty(&self) -> bool {
        self.allowed == 0 && self.refused == 0
    }

    pub fn add(&mut self, other: &NetworkUse) {
        self.allowed += other.allowed;
        self.refused += other.refused;
        for host in &other.refused_hosts {
            if !self.refused_hosts.contains(host) {
                self.refused_hosts.push(host.clone());
            }
        }
    }
}
