"""What the tests share: the config builder, the CLI runner, servers they start, builders of
bronze rows and pgoutput bytes, and the oracles they compare the pipeline with. Test modules
import shared things from here only; conftest files hold fixtures."""
