//! One module per subcommand.

pub mod agent;
pub mod bench;
pub mod devices;
pub mod emulate;
pub mod model;
pub mod monitor;
pub mod place;
pub mod run;
pub mod simulate;
pub mod train;
pub mod worker;
