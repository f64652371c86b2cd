//! Pure statistics over time series: weighted seven-number summaries and weighted
//! correlations. Knows nothing of flows or sockets; the analyzer feeds it plain slices.
//!
//! Weights are optional everywhere: `None` means every observation counts once. Scaling all
//! weights by a constant changes no result.

pub mod correlation;
pub mod summary;

pub use correlation::{Adjust, Correlation, correlate};
pub use summary::{PERCENTILES, QuantileKind, seven_number};
