//! Prints the device types with a registered kernel for each op type given on the command line.
fn main() {
    for op in std::env::args().skip(1) {
        match tf_iaware::runtime::tf::kernel_device_types(&op) {
            Ok(types) => println!("{op}: {types:?}"),
            Err(e) => eprintln!("{op}: {e}"),
        }
    }
}
