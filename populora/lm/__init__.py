"""The language model: the frozen base and PEFT adapters (model, adapters), the stacked multi-LoRA forward
(multilora), token sampling with exact token records (sampling) and the sampler of `sampler.engine`
(engines: hf stacked adapters, or vllm_engine); the devices a job runs on (gpus: which GPUs it holds,
device: whether they can run what the params ask for).
"""
