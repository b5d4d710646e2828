"""With a trained model: the network, the SavedModel export, predict, the in-graph digit preprocessing,
ensembles and `serve`.

It never imports `estimator_mnist.tf_task` (the training task builds and
exports the model with it, not the other way round). Several of its modules
import no TensorFlow (predict's and ensemble's planning, serve's HTTP layer),
so that bad input is refused before TensorFlow loads.
"""
