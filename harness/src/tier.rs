//! How far a user may build on a behaviour: the one vocabulary shared by the
//! catalogue's clauses and the simulator's semantic choices.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a behaviour rests on, orthogonal to where an expectation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// A public document promises it.
    Contract,
    /// The documents are silent, but widely used software depends on it.
    ReliedOn,
    /// What one driver happens to do: VA placement and reuse, which damaged
    /// handle bytes are checked and in what order, undocumented error codes,
    /// worker and process history, timing.
    Incidental,
}

impl Tier {
    /// Every tier, from the most to the least binding.
    pub const ALL: [Tier; 3] = [Tier::Contract, Tier::ReliedOn, Tier::Incidental];

    /// The tier's name in reports and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Contract => "contract",
            Tier::ReliedOn => "relied-on",
            Tier::Incidental => "incidental",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Tier, String> {
        Tier::ALL
            .into_iter()
            .find(|t| t.as_str() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown tier '{}' (valid: {})",
                    s.trim(),
                    Tier::ALL.map(Tier::as_str).join(", ")
                )
            })
    }
}
