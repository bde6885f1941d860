fn main() {
    let g = tensorflow::Graph::new();
    let _ = g;
    println!("{}", tf_iaware::version());
}
