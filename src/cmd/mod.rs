//! One module per subcommand.

pub mod bench;
pub mod devices;
pub mod model;
pub mod place;
pub mod run;
pub mod worker;
