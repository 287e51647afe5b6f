/* TF Lite Micro on an emulated board, counted the way our firmware is counted
 * (benchmarks/vs_tflm.py builds and runs it; it is not part of the toolkit).
 *
 * The board side is the project's own Cortex-M port (firmware/ports/cortex-m/: start-up,
 * UART, and the cost counter qe_port_cost_start/stop: SysTick under QEMU -icount, i.e.
 * executed instructions). The harness: the model's op resolver and interpreter, AllocateTensors,
 * the input copied in, one Invoke as a warm-up, then two Invokes each between
 * qe_port_cost_start() and qe_port_cost_stop() -- the same bracket as our firmware's BENCH
 * (firmware/core/harness.c, run_once: start, qe_model_invoke(), stop), with the input copied
 * outside it. It prints one line on UART 0 and ends QEMU through semihosting:
 *
 *   QE-VS-TFLM status=ok instructions=N,N arena_used=B output=HEX
 *
 * The model, its input and its op list come from vs_tflm_model.h, which the script writes:
 *   QE_VS_MODEL[], QE_VS_INPUT[], QE_VS_INPUT_LEN, QE_VS_ARENA_BYTES, QE_VS_N_OPS and
 *   QE_VS_ADD_OPS(r) (r.AddFullyConnected(); ... for the model's operators). */
#include <cstdint>
#include <cstring>
#include <new>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

extern "C" {
#include "qe_port.h"
void qe_semihost_exit(uint32_t code) __attribute__((noreturn));
}

#include "vs_tflm_model.h"

alignas(16) static uint8_t arena[QE_VS_ARENA_BYTES];

static void put(const char *s)
{
    qe_port_write(reinterpret_cast<const uint8_t *>(s), static_cast<uint32_t>(strlen(s)));
}

static void put_u32(uint32_t v)
{
    char b[11];
    int i = 10;
    b[i] = '\0';
    do {
        b[--i] = static_cast<char>('0' + v % 10u);
        v /= 10u;
    } while (v != 0u);
    put(b + i);
}

static void put_hex(const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char b[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        b[0] = digits[p[i] >> 4];
        b[1] = digits[p[i] & 15u];
        put(b);
    }
}

[[noreturn]] static void fail(const char *why)
{
    put("QE-VS-TFLM status=");
    put(why);
    put("\n");
    qe_semihost_exit(1u);
}

/* Not inlined, as run_once() in our harness: the same instructions between start and stop. */
__attribute__((noinline)) static uint32_t run_once(tflite::MicroInterpreter &interpreter)
{
    qe_port_cost_start();
    const TfLiteStatus s = interpreter.Invoke();
    const uint32_t cost = qe_port_cost_stop();
    if (s != kTfLiteOk)
        fail("invoke-failed");
    return cost;
}

static void set_input(tflite::MicroInterpreter &interpreter)
{
    TfLiteTensor *in = interpreter.input(0);
    if (in == nullptr || in->bytes != QE_VS_INPUT_LEN)
        fail("input-size-mismatch");
    memcpy(in->data.raw, QE_VS_INPUT, QE_VS_INPUT_LEN);
}

int main(void)
{
    qe_port_init();
    const tflite::Model *model = tflite::GetModel(QE_VS_MODEL);
    if (model->version() != TFLITE_SCHEMA_VERSION)
        fail("schema-version");
    /* Placement new into static storage: never destroyed, so no atexit registration (and no
     * C++ runtime support beyond <new>). */
    using Resolver = tflite::MicroMutableOpResolver<QE_VS_N_OPS>;
    alignas(Resolver) static uint8_t resolver_mem[sizeof(Resolver)];
    alignas(tflite::MicroInterpreter) static uint8_t interpreter_mem[sizeof(tflite::MicroInterpreter)];
    Resolver &resolver = *new (resolver_mem) Resolver();
    QE_VS_ADD_OPS(resolver);
    tflite::MicroInterpreter &interpreter =
        *new (interpreter_mem) tflite::MicroInterpreter(model, resolver, arena, sizeof arena);
    if (interpreter.AllocateTensors() != kTfLiteOk)
        fail("allocate-tensors-failed");
    set_input(interpreter);
    (void)run_once(interpreter);   /* warm-up */
    set_input(interpreter);
    const uint32_t c1 = run_once(interpreter);
    set_input(interpreter);
    const uint32_t c2 = run_once(interpreter);

    put("QE-VS-TFLM status=ok instructions=");
    put_u32(c1);
    put(",");
    put_u32(c2);
    put(" arena_used=");
    put_u32(static_cast<uint32_t>(interpreter.arena_used_bytes()));
    put(" output=");
    for (size_t k = 0; k < interpreter.outputs_size(); k++) {
        const TfLiteTensor *out = interpreter.output(k);
        if (k)
            put(",");
        put_hex(reinterpret_cast<const uint8_t *>(out->data.raw), out->bytes);
    }
    put("\n");
    qe_semihost_exit(0u);
}

/* Virtual destructors name operator delete; nothing is ever deleted here. */
extern "C" void __cxa_pure_virtual(void) { fail("pure-virtual"); }
void operator delete(void *) noexcept { fail("delete"); }
void operator delete(void *, size_t) noexcept { fail("delete"); }
/* TFLM's TFLITE_ABORT: end QEMU with a message (newlib's abort() would pull in signal() and
 * malloc()). */
extern "C" void abort(void) { fail("abort"); }
