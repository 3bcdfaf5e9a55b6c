//! The simulated driver.
