// The migrations are embedded in the binary (`embed_migrations!`); a new or edited migration
// must rebuild it, or the binary would migrate to the schema it was last built with.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
