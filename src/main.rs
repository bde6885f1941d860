fn main() {
    println!("tf-iaware");
}
