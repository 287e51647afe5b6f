/* ACT (docs/protocol.md, "Act"): the board computes the action itself with the exported
 * library's NAME_act, the code a user deploys (`quarl-edge hil --act`). Built only into such a
 * firmware (QE_ACT set), beside the harness's model: the build generates qe_act_glue.c, which
 * forwards qe_act_policy / qe_act_policy_reset to NAME_act / NAME_reset, and defines
 * QE_ACT_OBS and QE_ACT_ACTIONS (the library's NAME_OBS_SIZE and NAME_ACTION_SIZE).
 *
 * Request: QE_ACT_OBS float32s (the observation); reply: u32 cost of the NAME_act call, then
 * QE_ACT_ACTIONS float32s (the action). A retry (same sequence number and CRC) is answered
 * from the last reply, not run again: a recurrent policy's state moves on once per step. */
#include <stdint.h>
#include <string.h>

#include "qe_protocol.h"
#include "qe_port.h"
#include "protocol.h"
#include "harness.h"

void qe_act_handle(const qe_frame_t *f);
void qe_act_reset(void);

int qe_act_policy(const float *obs, float *action);
void qe_act_policy_reset(void);

#if defined(QE_ERROR_MESSAGES) && !QE_ERROR_MESSAGES   /* as harness.c: no texts on AVR */
#define QE_ACT_MSG(s) ((const char *)0)
#else
#define QE_ACT_MSG(s) (s)
#endif

static float act_last[QE_ACT_ACTIONS];
static uint32_t act_cost;
static uint8_t act_valid, act_seq;
static uint16_t act_crc;

static void tx_act(uint8_t seq)
{
    uint16_t i;
    qe_tx_begin((uint8_t)(QE_CMD_ACT | QE_PROTO_REPLY_BIT), seq, (uint16_t)(4u + 4u * QE_ACT_ACTIONS));
    qe_tx_u32(act_cost);
    for (i = 0; i < QE_ACT_ACTIONS; ++i)
        qe_tx_f32(act_last[i]);
    qe_tx_end();
}

void qe_act_handle(const qe_frame_t *f)
{
    float obs[QE_ACT_OBS];
    int rc;
    if (act_valid && f->seq == act_seq && f->crc == act_crc) {
        tx_act(f->seq);
        return;
    }
    if (f->len != 4u * QE_ACT_OBS) {
        qe_tx_error(f->seq, QE_ERR_BAD_PAYLOAD, f->cmd, QE_ACT_MSG("ACT takes the observation's floats"));
        return;
    }
    memcpy(obs, f->payload, sizeof obs);   /* little-endian IEEE-754: checked in harness.c */
    act_valid = 0;
    qe_port_cost_start();
    rc = qe_act_policy(obs, act_last);
    act_cost = qe_port_cost_stop();
    if (rc < 0) {
        qe_tx_error(f->seq, QE_ERR_BAD_PAYLOAD, f->cmd, QE_ACT_MSG("NAME_act refused the observation"));
        return;
    }
    act_valid = 1;
    act_seq = f->seq;
    act_crc = f->crc;
    tx_act(f->seq);
}

void qe_act_reset(void)
{
    act_valid = 0;
    qe_act_policy_reset();
}
